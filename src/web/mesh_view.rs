//! An SVG drawing of a process mesh: one box per device with its process id and its colour
//! (the colour its tiles have everywhere), axis names along the edges. A 3-axis mesh is
//! drawn as layers side by side, one per coordinate of its first axis. A selected device is
//! outlined; lit groups are outlined in their purpose's colour (data parallel green, ...).

use crate::dist::ProcessMesh;
use std::sync::Arc;
use yew::prelude::*;

/// Properties of [`MeshView`].
#[derive(Properties, PartialEq)]
pub struct MeshViewProps {
    pub mesh: Arc<ProcessMesh>,
    #[prop_or_default]
    pub selected: Option<u32>,
    /// Groups to light, each with its purpose (the selected rank's groups, say).
    #[prop_or_default]
    pub lit: Vec<(Vec<u32>, crate::ir::Purpose)>,
    #[prop_or_default]
    pub on_select: Option<Callback<u32>>,
}

const CELL: f64 = 46.0;
const GAP: f64 = 8.0;
const MARGIN: f64 = 30.0;

/// Where device `i` (in row-major order) sits: 3-axis meshes put each first-axis layer
/// beside the last, with a gap.
fn position(shape: &[usize], i: usize) -> (f64, f64) {
    let cols = shape.last().copied().unwrap_or(1).max(1);
    let (layer, rest) = match shape {
        [_, r, c] => (i / (r * c).max(1), i % (r * c).max(1)),
        _ => (0, i),
    };
    let (r, c) = (rest / cols, rest % cols);
    let layer_w = cols as f64 * (CELL + GAP) + LAYER_GAP;
    (
        MARGIN + layer as f64 * layer_w + c as f64 * (CELL + GAP),
        MARGIN + r as f64 * (CELL + GAP),
    )
}

/// Gap between the layers of a 3-axis mesh.
const LAYER_GAP: f64 = 24.0;

/// Draws the mesh as a grid of devices.
#[component]
pub fn MeshView(props: &MeshViewProps) -> Html {
    let mesh = &props.mesh;
    let shape = mesh.shape();
    let cols = shape.last().copied().unwrap_or(1).max(1);
    let (layers, rows) = match shape {
        [l, r, _] => (*l, *r),
        [r, _] => (1, *r),
        _ => (1, 1),
    };
    let layer_w = cols as f64 * (CELL + GAP) + LAYER_GAP;
    let width = MARGIN + layers as f64 * layer_w - LAYER_GAP;
    let height = MARGIN + rows as f64 * (CELL + GAP) + if layers > 1 { 16.0 } else { 0.0 };
    let names = mesh.dim_names();
    let col_axis = names.last().cloned().unwrap_or_default();
    let row_axis = (shape.len() >= 2).then(|| names[shape.len() - 2].clone());
    // A `pp` axis colours each pipeline stage's sub-mesh.
    let stages = crate::dist::Stages::of(mesh, 1);
    let stage_of = |pid: u32| stages.axis.map(|_| stages.stage_of(mesh, pid));
    let devices = mesh
        .process_ids()
        .iter()
        .enumerate()
        .map(|(i, &pid)| device(props, shape, i, pid, stage_of(pid)));
    let layer_labels = (layers > 1).then(|| {
        let name = names.first().cloned().unwrap_or_default();
        (0..layers).map(|l| {
            let x = MARGIN + l as f64 * layer_w + (layer_w - LAYER_GAP) / 2.0;
            html! { <text class="axis-label layer" x={x.to_string()} y={(height - 4.0).to_string()} text-anchor="middle">{ format!("{name} = {l}") }</text> }
        }).collect::<Html>()
    });
    let row_label = row_axis.map(|row| {
        let y = MARGIN + rows as f64 * (CELL + GAP) / 2.0;
        html! {
            <text class="axis-label" x="12" y={y.to_string()} text-anchor="middle"
                transform={format!("rotate(90 12 {y})")}>{ format!("{row} →") }</text>
        }
    });
    html! {
        <figure class="mesh-view">
            <svg viewBox={format!("0 0 {width} {height}")} width={width.to_string()} height={height.to_string()}
                role="group" aria-label={format!("process mesh {mesh}")}>
                <text class="axis-label" x={(MARGIN + cols as f64 * (CELL + GAP) / 2.0).to_string()} y="18" text-anchor="middle">
                    { format!("{col_axis} →") }
                </text>
                { row_label }
                { for devices }
                { layer_labels }
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

/// One device: its box, purpose rings, colour swatch, id and pipeline stage.
fn device(
    props: &MeshViewProps,
    shape: &[usize],
    i: usize,
    pid: u32,
    stage: Option<usize>,
) -> Html {
    let mesh = &props.mesh;
    let (x, y) = position(shape, i);
    let onclick = props
        .on_select
        .clone()
        .map(|cb| Callback::from(move |_: MouseEvent| cb.emit(pid)));
    // Devices are buttons for the keyboard too (Enter or Space selects).
    let onkeydown = props.on_select.clone().map(|cb| {
        Callback::from(move |e: KeyboardEvent| {
            if matches!(e.key().as_str(), "Enter" | " ") {
                e.prevent_default();
                e.stop_propagation();
                cb.emit(pid);
            }
        })
    });
    let focusable = props.on_select.is_some();
    let purposes: Vec<&'static str> = props
        .lit
        .iter()
        .filter(|(g, _)| g.contains(&pid))
        .map(|(_, p)| super::program_view::purpose_class(*p))
        .collect();
    let class = classes!(
        "device",
        (props.selected == Some(pid)).then_some("selected"),
        (!purposes.is_empty()).then_some("lit"),
        stage.map(|s| format!("stage stage-{}", s % 6))
    );
    // One ring per purpose whose group holds this device, innermost first.
    let rings = purposes.iter().enumerate().map(|(k, p)| {
            let inset = 3.0 + k as f64 * 4.0;
            html! { <rect class={classes!("ring", *p)} x={(x + inset).to_string()} y={(y + inset).to_string()} width={(CELL - 2.0 * inset).to_string()} height={(CELL - 2.0 * inset).to_string()} rx="5" /> }
        });
    html! {
        <g {class} data-rank={pid.to_string()} data-lit={purposes.join(" ")} {onclick} {onkeydown}
            tabindex={focusable.then_some("0")} role={focusable.then_some("button")}>
            <title>{ format!("rank {pid}: coordinates {:?}", mesh.coords_of(pid).unwrap_or_default()) }</title>
            <rect x={x.to_string()} y={y.to_string()} width={CELL.to_string()} height={CELL.to_string()} rx="7" />
            { for rings }
            <rect class="swatch" x={(x + 6.0).to_string()} y={(y + CELL - 9.0).to_string()} width={(CELL - 12.0).to_string()} height="5" fill={super::tile_view::device_colour(pid)} />
            <text x={(x + CELL / 2.0).to_string()} y={(y + CELL / 2.0 + 3.0).to_string()} text-anchor="middle">{ format!("{pid}") }</text>
            if let Some(s) = stage {
                <text class="stage-tag" x={(x + 4.0).to_string()} y={(y + 11.0).to_string()}>{ format!("S{s}") }</text>
            }
        </g>
    }
}
