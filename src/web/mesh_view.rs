//! An SVG drawing of a process mesh: one box per device with its process id, axis names
//! along the edges. Meshes with more than two axes fold the leading axes into rows. A
//! selected device is outlined; lit devices (a communication group) are filled.

use crate::dist::ProcessMesh;
use std::sync::Arc;
use yew::prelude::*;

/// Properties of [`MeshView`].
#[derive(Properties, PartialEq)]
pub struct MeshViewProps {
    pub mesh: Arc<ProcessMesh>,
    #[prop_or_default]
    pub selected: Option<u32>,
    /// Devices to light (the selected rank's group, say).
    #[prop_or_default]
    pub lit: Vec<u32>,
    #[prop_or_default]
    pub on_select: Option<Callback<u32>>,
}

const CELL: f64 = 46.0;
const GAP: f64 = 8.0;
const MARGIN: f64 = 30.0;

/// Draws the mesh as a grid of devices.
#[component]
pub fn MeshView(props: &MeshViewProps) -> Html {
    let mesh = &props.mesh;
    let shape = mesh.shape();
    let cols = shape.last().copied().unwrap_or(1);
    let rows = mesh.size() / cols.max(1);
    let width = MARGIN + cols as f64 * (CELL + GAP);
    let height = MARGIN + rows as f64 * (CELL + GAP);
    let names = mesh.dim_names();
    let col_axis = names.last().cloned().unwrap_or_default();
    let row_axes: Vec<&str> = names[..names.len().saturating_sub(1)]
        .iter()
        .map(String::as_str)
        .collect();
    // A `pp` axis colours each pipeline stage's sub-mesh.
    let stages = crate::dist::Stages::of(mesh, 1);
    let stage_of = |pid: u32| stages.axis.map(|_| stages.stage_of(mesh, pid));
    let devices = mesh.process_ids().iter().enumerate().map(|(i, &pid)| {
        let (r, c) = (i / cols, i % cols);
        let x = MARGIN + c as f64 * (CELL + GAP);
        let y = MARGIN + r as f64 * (CELL + GAP);
        let onclick = props.on_select.clone().map(|cb| Callback::from(move |_: MouseEvent| cb.emit(pid)));
        let stage = stage_of(pid);
        let class = classes!("device", (props.selected == Some(pid)).then_some("selected"), props.lit.contains(&pid).then_some("lit"),
            stage.map(|s| format!("stage stage-{}", s % 6)));
        html! {
            <g {class} data-rank={pid.to_string()} {onclick}>
                <title>{ format!("rank {pid}: coordinates {:?}", mesh.coords_of(pid).unwrap_or_default()) }</title>
                <rect x={x.to_string()} y={y.to_string()} width={CELL.to_string()} height={CELL.to_string()} rx="7" />
                <text x={(x + CELL / 2.0).to_string()} y={(y + CELL / 2.0 + 5.0).to_string()} text-anchor="middle">{ format!("{pid}") }</text>
                if let Some(s) = stage {
                    <text class="stage-tag" x={(x + 4.0).to_string()} y={(y + 11.0).to_string()}>{ format!("S{s}") }</text>
                }
            </g>
        }
    });
    let row_label = if row_axes.is_empty() {
        html! {}
    } else {
        let y = MARGIN + rows as f64 * (CELL + GAP) / 2.0;
        html! {
            <text class="axis-label" x="12" y={y.to_string()} text-anchor="middle"
                transform={format!("rotate(90 12 {y})")}>{ format!("{} →", row_axes.join("×")) }</text>
        }
    };
    html! {
        <figure class="mesh-view">
            <svg viewBox={format!("0 0 {width} {height}")} width={width.to_string()} height={height.to_string()}
                role="img" aria-label={format!("process mesh {mesh}")}>
                <text class="axis-label" x={(MARGIN + cols as f64 * (CELL + GAP) / 2.0).to_string()} y="18" text-anchor="middle">
                    { format!("{col_axis} →") }
                </text>
                { row_label }
                { for devices }
            </svg>
            <figcaption>
                { format!("mesh {mesh}: {} devices", mesh.size()) }
                if stages.stages > 1 {
                    { format!(" · {} pipeline stages (S0–S{}), one per `pp` coordinate", stages.stages, stages.stages - 1) }
                }
            </figcaption>
        </figure>
    }
}
