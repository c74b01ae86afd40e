//! The `allocations` picture: bytes per allocation × kernel (the `allocs` set), hot cells dark,
//! allocations no kernel reached as empty rows at the bottom (cold), each row labelled with its
//! id, size and what was copied in.

use egpu::host::mem::Recording;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::draw::{DrawResult, err, no_data, short};

/// Kernels drawn as columns (the rest summed into one "other kernels" column).
pub(crate) const MAX_COLUMNS: usize = 16;
/// Allocations drawn as rows, hottest first, then cold ones.
pub(crate) const MAX_ROWS: usize = 40;

/// What the picture draws.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Allocations {
    /// The columns' kernel names, most bytes first.
    pub(crate) kernels: Vec<String>,
    /// The rows, top to bottom: the hottest allocation first.
    pub(crate) rows: Vec<AllocRow>,
    /// Allocations left out (past [`MAX_ROWS`]).
    pub(crate) left_out: usize,
}

/// One allocation's row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AllocRow {
    /// `#3 4.19 MB`, with `freed`, `managed`, `copied in …` where so.
    pub(crate) label: String,
    /// Bytes the kernels' accesses moved there, per column.
    pub(crate) bytes: Vec<u64>,
}

/// The picture's data, or `None` when the recording has no `allocs` set's data.
pub(crate) fn allocations(recording: &Recording) -> Option<Allocations> {
    let uses = &recording.alloc_traffic;
    if uses.is_empty() && recording.allocations.is_empty() {
        return None;
    }
    let moved = |t: &egpu::host::mem::allocs::AllocTraffic| {
        t.loaded.saturating_add(t.stored).saturating_add(t.atomic)
    };
    let mut per_kernel: std::collections::BTreeMap<&str, u64> = Default::default();
    for u in uses {
        let b = per_kernel.entry(u.kernel.as_str()).or_default();
        *b = b.saturating_add(moved(&u.traffic));
    }
    let mut kernels: Vec<(&str, u64)> = per_kernel.into_iter().collect();
    kernels.sort_by_key(|(k, b)| (std::cmp::Reverse(*b), *k));
    let folded = kernels.len() > MAX_COLUMNS;
    let shown = if folded { MAX_COLUMNS - 1 } else { kernels.len() };
    let column =
        |kernel: &str| kernels.iter().position(|(k, _)| *k == kernel).map(|i| i.min(shown));
    let mut names: Vec<String> = (kernels.iter().take(shown))
        .map(|(k, _)| short(&super::data::kernel_name(recording, k)))
        .collect();
    if folded {
        names.push(format!("{} other kernels", kernels.len() - shown));
    }
    // Every allocation made, and allocation 0 when accesses fell in none.
    let mut rows: std::collections::BTreeMap<u64, Vec<u64>> =
        (recording.allocations.iter()).map(|a| (a.id, vec![0; names.len()])).collect();
    for u in uses {
        let row = rows.entry(u.alloc).or_insert_with(|| vec![0; names.len()]);
        if let Some(c) = column(&u.kernel) {
            row[c] = row[c].saturating_add(moved(&u.traffic));
        }
    }
    let mut rows: Vec<(u64, Vec<u64>)> = rows.into_iter().collect();
    rows.sort_by_key(|(id, b)| (std::cmp::Reverse(b.iter().sum::<u64>()), *id));
    let left_out = rows.len().saturating_sub(MAX_ROWS);
    rows.truncate(MAX_ROWS);
    let bytes = egpu::host::mem::table::bytes;
    let rows = (rows.into_iter())
        .map(|(id, b)| {
            let made = recording.allocations.iter().find(|a| a.id == id);
            let mut label = match made {
                None if id == 0 => "in no allocation".to_owned(),
                None => format!("#{id}"),
                Some(a) => format!("#{id} {}", bytes(a.bytes)),
            };
            if let Some(a) = made {
                for (yes, what) in [(a.managed, "managed"), (a.freed, "freed")] {
                    if yes {
                        label.push_str(&format!(", {what}"));
                    }
                }
                if a.copied_in > 0 {
                    label.push_str(&format!(", {} copied in", bytes(a.copied_in)));
                }
            }
            AllocRow { label, bytes: b }
        })
        .collect();
    Some(Allocations { kernels: names, rows, left_out })
}

/// The picture: a cell per allocation and kernel, shaded by bytes (log scale).
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: Option<&Allocations>,
    why: &str,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let title = "bytes per allocation × kernel (hot dark, cold rows empty)";
    let Some(d) = data else { return no_data(root, title, why) };
    let (rows, columns) = (d.rows.len(), d.kernels.len().max(1));
    let mut chart = ChartBuilder::on(root)
        .caption(title, (super::draw::FONT, 24))
        .margin(12)
        .x_label_area_size(if columns > 6 { 250 } else { 40 })
        .y_label_area_size(280)
        .build_cartesian_2d(0f64..columns as f64, 0f64..rows.max(1) as f64)
        .map_err(err)?;
    // Row 0 at the top: the hottest.
    let row_label = |y: &f64| {
        let r = *y as usize;
        d.rows.get(rows.saturating_sub(r + 1)).map_or_else(String::new, |r| r.label.clone())
    };
    let column_label = |x: &f64| d.kernels.get(*x as usize).map(|k| short(k)).unwrap_or_default();
    // Kernels' names across when few fit, else down from each column (drawn below).
    let down = columns > 6;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(columns * 2 + 1)
        .x_label_formatter(&|x| match x.fract() == 0.5 && !down {
            true => column_label(x),
            false => String::new(),
        })
        .y_labels(rows * 2 + 1)
        .y_label_formatter(&|y| match y.fract() == 0.5 {
            true => row_label(y),
            false => String::new(),
        })
        .label_style((super::draw::FONT, 12))
        .draw()
        .map_err(err)?;
    if down {
        let style = TextStyle::from((super::draw::FONT, 12).into_font())
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for c in 0..columns {
            let (x, y) = chart.backend_coord(&(c as f64 + 0.5, 0.0));
            let name: String = column_label(&(c as f64)).chars().take(34).collect();
            root.draw(&Text::new(name, (x, y + 6), style.clone())).map_err(err)?;
        }
    }
    let moved = || d.rows.iter().flat_map(|r| r.bytes.iter().copied()).filter(|&b| b > 0);
    let (min, max) = (moved().min().unwrap_or(0), moved().max().unwrap_or(0));
    let cells: Vec<(f64, f64, u64)> = (d.rows.iter().enumerate())
        .flat_map(|(i, r)| {
            let y = (rows - i - 1) as f64;
            let filled = r.bytes.iter().enumerate().filter(|(_, b)| **b > 0);
            filled.map(move |(c, &b)| (c as f64, y, b)).collect::<Vec<_>>()
        })
        .collect();
    let squares = (cells.iter())
        .map(|&(x, y, b)| Rectangle::new([(x, y), (x + 1.0, y + 1.0)], heat(b, min, max).filled()));
    chart.draw_series(squares).map_err(err)?;
    // Each cell's bytes, where the rows leave room for them.
    if rows <= 24 {
        let bytes = egpu::host::mem::table::bytes;
        for light in [true, false] {
            let colour = if light { &WHITE } else { &BLACK };
            let style = TextStyle::from((super::draw::FONT, 13).into_font())
                .color(colour)
                .pos(Pos::new(HPos::Center, VPos::Center));
            let labels = (cells.iter())
                .filter(|&&(_, _, b)| (heat_of(b, min, max) > 0.5) == light)
                .map(|&(x, y, b)| Text::new(bytes(b), (x + 0.5, y + 0.5), style.clone()));
            chart.draw_series(labels).map_err(err)?;
        }
    }
    let grid = (0..=rows).map(|r| {
        PathElement::new(vec![(0.0, r as f64), (columns as f64, r as f64)], RGBColor(225, 225, 225))
    });
    chart.draw_series(grid).map_err(err)?;
    let note = format!(
        "{} to {}, log scale{}",
        egpu::host::mem::table::bytes(min),
        egpu::host::mem::table::bytes(max),
        match d.left_out {
            0 => String::new(),
            n => format!("; {n} more allocations not drawn"),
        }
    );
    let (w, h) = root.dim_in_pixel();
    let style = TextStyle::from((super::draw::FONT, 14).into_font())
        .pos(Pos::new(HPos::Right, VPos::Bottom));
    root.draw(&Text::new(note, (w as i32 - 12, h as i32 - 4), style)).map_err(err)?;
    Ok(())
}

/// Where `bytes` falls between the fewest (`min`) and the most (`max`) of any cell, on a log
/// scale, from a quarter (the fewest, still seen) to one.
fn heat_of(bytes: u64, min: u64, max: u64) -> f64 {
    if max <= min || bytes <= min {
        return if max <= min { 1.0 } else { 0.25 };
    }
    let span = (max as f64 / min as f64).ln();
    0.25 + 0.75 * ((bytes as f64 / min as f64).ln() / span).clamp(0.0, 1.0)
}

/// A cell's colour: light yellow to dark blue as [`heat_of`] grows.
fn heat(bytes: u64, min: u64, max: u64) -> RGBColor {
    let f = heat_of(bytes, min, max);
    let (a, b) = ((255.0, 237.0, 160.0), (8.0, 29.0, 88.0));
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}
