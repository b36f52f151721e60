//! The browser playground (wasm32 only): Yew function components over the core. Only this
//! module touches Yew or web-sys.

mod app;
mod mesh_view;

pub use app::App;
pub use mesh_view::{MeshView, MeshViewProps};

/// Mounts the playground on `<body>`.
pub fn start() {
    yew::Renderer::<App>::new().render();
}
