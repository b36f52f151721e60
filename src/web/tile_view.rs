//! A tensor drawn as tiles coloured by device (the scaling book's picture): the last two
//! dims are the face, earlier dims' blocks are faces stacked behind it, replicas are stacked
//! copies, and partial addends are stacked tiles marked Σ that an all-reduce collapses into
//! one. Geometry comes from [`crate::dist::tiling`], so the picture cannot disagree with the
//! layout.

use crate::dist::{Tile, Tiling};
use yew::prelude::*;

/// A colour-blind-safe palette (Okabe–Ito, with grey for black), one per device modulo 8.
/// The mesh view uses the same colours, so a device is one colour everywhere.
pub const DEVICE_COLOURS: [&str; 8] = [
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#8C8C8C",
];

/// The colour of a device.
pub fn device_colour(device: u32) -> &'static str {
    DEVICE_COLOURS[device as usize % DEVICE_COLOURS.len()]
}

/// Properties of [`TileView`].
#[derive(Properties, PartialEq)]
pub struct TileViewProps {
    pub tiling: Tiling,
    pub shape: Vec<usize>,
    /// A caption under the drawing (the tensor's name, say).
    #[prop_or_default]
    pub caption: AttrValue,
    /// A device whose tiles are outlined (the selected rank).
    #[prop_or_default]
    pub mine: Option<u32>,
    /// The longer side of the face, in pixels.
    #[prop_or(150.0)]
    pub size: f64,
    /// A tensor dim to mark as contracted (a matmul's k).
    #[prop_or_default]
    pub contracted: Option<usize>,
}

/// Stacked copies drawn at most (the rest are counted in the label).
const MAX_STACK: usize = 4;
/// Offset between stacked copies and faces.
const STEP: f64 = 6.0;
/// Faces drawn at most for dims before the last two.
const MAX_FACES: usize = 4;

/// Width and height of the face: proportional to the last two dims, the shorter side
/// clamped to a fifth of the longer so a [64, 4096] tensor stays visible.
fn face_size(shape: &[usize], size: f64) -> (f64, f64) {
    let (rows, cols) = match shape {
        [] => (1.0, 1.0),
        [c] => (1.0, *c as f64),
        [.., r, c] => (*r as f64, *c as f64),
    };
    let (rows, cols) = (rows.max(1.0), cols.max(1.0));
    let long = rows.max(cols);
    let w = (size * cols / long).max(size / 5.0);
    let h = if shape.len() < 2 {
        size / 5.0
    } else {
        (size * rows / long).max(size / 5.0)
    };
    (w, h)
}

/// The face position of a tile (row range, column range) as fractions of the face.
fn fractions(tile: &Tile, shape: &[usize]) -> ((f64, f64), (f64, f64)) {
    let frac = |d: Option<usize>| {
        d.and_then(|d| Some((tile.ranges.get(d)?, *shape.get(d)?)))
            .map_or((0.0, 1.0), |(&(a, b), n)| {
                let n = n.max(1) as f64;
                (a as f64 / n, b as f64 / n)
            })
    };
    let n = shape.len();
    let row_dim = (n >= 2).then(|| n - 2);
    let col_dim = n.checked_sub(1);
    (frac(row_dim), frac(col_dim))
}

/// The index of a tile's face: its block coordinate over the dims before the last two.
fn face_of(tile: &Tile, tiling: &Tiling) -> usize {
    let lead = tiling.splits.len().saturating_sub(2);
    tile.index[..lead]
        .iter()
        .zip(&tiling.splits)
        .fold(0, |acc, (&i, &n)| acc * n + i)
}

fn device_label(devs: &[u32]) -> String {
    match devs {
        [] => String::new(),
        [d] => d.to_string(),
        [a, b] => format!("{a},{b}"),
        [a, .., z] => format!("{a}…{z} ({})", devs.len()),
    }
}

struct Geometry {
    w: f64,
    h: f64,
    /// Offset of the front face from the top-left (room for the stacks behind it).
    front: f64,
}

fn tile_html(
    t: &Tile,
    tiling: &Tiling,
    shape: &[usize],
    g: &Geometry,
    props: &TileViewProps,
) -> Html {
    let face = face_of(t, tiling);
    if face >= MAX_FACES {
        return html! {};
    }
    let ((r0, r1), (c0, c1)) = fractions(t, shape);
    let face_shift = face as f64 * STEP * 2.0;
    let (x, y) = (
        g.front - face_shift + c0 * g.w,
        g.front - face_shift + r0 * g.h,
    );
    let (w, h) = ((c1 - c0) * g.w, (r1 - r0) * g.h);
    let partial = t.addends.len() > 1;
    // One copy per partial addend, else one per replica; the first device colours a copy.
    let copies: Vec<Vec<u32>> = if partial {
        t.addends.clone()
    } else {
        t.addends
            .first()
            .map(|a| a.iter().map(|&d| vec![d]).collect())
            .unwrap_or_default()
    };
    let shown = copies.len().min(MAX_STACK);
    let mine = props
        .mine
        .is_some_and(|m| t.addends.iter().any(|a| a.contains(&m)));
    let rects = copies.iter().take(shown).enumerate().rev().map(|(k, devs)| {
        let off = k as f64 * STEP;
        let colour = devs.first().map_or("#ccc", |&d| device_colour(d));
        let class = classes!("tile", partial.then_some("partial"), (k == 0 && mine).then_some("mine"));
        html! { <rect {class} x={(x - off).to_string()} y={(y - off).to_string()} width={w.max(1.0).to_string()} height={h.max(1.0).to_string()} fill={colour} data-devices={device_label(devs)} /> }
    });
    let all: Vec<u32> = t.addends.iter().flatten().copied().collect();
    let label = if partial {
        format!("Σ{}", t.addends.len())
    } else {
        device_label(&all)
    };
    let text = (w >= 18.0 && h >= 12.0 && face == 0).then(|| html! {
        <text class="tile-label" x={(x + w / 2.0).to_string()} y={(y + h / 2.0 + 4.0).to_string()} text-anchor="middle">{ label.clone() }</text>
    });
    html! {
        <g class="tile-group" data-index={format!("{:?}", t.index)}>
            <title>{ format!("block {:?} = elements {:?}: {}", t.index, t.ranges, holders(t)) }</title>
            { for rects }
            { text }
        </g>
    }
}

/// Who holds a tile, as a sentence.
fn holders(t: &Tile) -> String {
    match t.addends.as_slice() {
        [one] => format!("devices {} hold identical copies", device_label(one)),
        many => format!(
            "{} partial addends on devices {} (summed by an all-reduce)",
            many.len(),
            many.iter()
                .map(|a| device_label(a))
                .collect::<Vec<_>>()
                .join(" + ")
        ),
    }
}

/// One tensor as tiles.
#[component]
pub fn TileView(props: &TileViewProps) -> Html {
    let shape = &props.shape;
    let tiling = &props.tiling;
    let (w, h) = face_size(shape, props.size);
    let lead: usize = tiling.splits.iter().rev().skip(2).product();
    let faces = if shape.len() > 2 {
        lead.min(MAX_FACES)
    } else {
        1
    };
    let stack = if tiling.addends() > 1 {
        tiling.addends()
    } else {
        tiling.replicas
    };
    let behind = (faces - 1) as f64 * STEP * 2.0 + (stack.min(MAX_STACK) - 1) as f64 * STEP;
    let g = Geometry {
        w,
        h,
        front: behind + 2.0,
    };
    let (vw, vh) = (g.front + w + 2.0, g.front + h + 16.0);
    let tiles = tiling
        .tiles
        .iter()
        .rev()
        .map(|t| tile_html(t, tiling, shape, &g, props));
    let k_mark = props.contracted.and_then(|k| {
        let n = shape.len();
        let (x, y) = (g.front, g.front + h + 12.0);
        if k + 1 == n {
            Some(html! { <text class="k-mark" x={(x + w / 2.0).to_string()} y={y.to_string()} text-anchor="middle">{ "← k (contracted) →" }</text> })
        } else if n >= 2 && k + 2 == n {
            Some(html! { <text class="k-mark" x={(x + w + 1.0).to_string()} y={(g.front + h / 2.0).to_string()} text-anchor="end">{ "k↕" }</text> })
        } else {
            None
        }
    });
    let more = (lead > MAX_FACES && shape.len() > 2)
        .then(|| format!(" (+{} faces not drawn)", lead - MAX_FACES));
    let summary = summary(tiling, shape);
    html! {
        <figure class="tile-view" data-splits={format!("{:?}", tiling.splits)} data-replicas={tiling.replicas.to_string()} data-addends={tiling.addends().to_string()}>
            <svg viewBox={format!("0 0 {vw} {vh}")} width={vw.to_string()} height={vh.to_string()} role="img" aria-label={format!("{}: {summary}", props.caption)}>
                { for tiles }
                { k_mark }
            </svg>
            <figcaption>{ format!("{} {summary}{}", props.caption, more.unwrap_or_default()) }</figcaption>
        </figure>
    }
}

/// "4 blocks × 2 copies" / "2 blocks, 4 partial addends each".
fn summary(tiling: &Tiling, shape: &[usize]) -> String {
    let blocks = tiling.tiles.len();
    let mut s = format!(
        "{shape:?}: {blocks} block{}",
        if blocks == 1 { "" } else { "s" }
    );
    if tiling.addends() > 1 {
        s.push_str(&format!(", {} partial addends each (Σ)", tiling.addends()));
    }
    if tiling.replicas > 1 {
        s.push_str(&format!(" × {} identical copies", tiling.replicas));
    }
    s
}
