//! The pictures, drawn with plotters on any backend (SVG text or an RGB buffer made a PNG):
//! each function takes the data `data.rs` prepared, or `None` and the reason there is none,
//! which the picture then says.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::{Bandwidth, Durations, Heatmap, Sms, TimeAxis};

/// Every picture's size, in pixels.
pub(crate) const SIZE: (u32, u32) = (1200, 720);

/// A drawing error, said in words (backends' errors differ in type).
pub(crate) type DrawResult = Result<(), String>;

pub(super) fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

pub(super) const FONT: &str = "sans-serif";

/// The legend of a chart's series, in the top right corner.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> DrawResult {
    chart
        .configure_series_labels()
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// A picture with nothing to draw: its title and why.
pub(super) fn no_data<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    why: &str,
) -> DrawResult {
    let (w, h) = root.dim_in_pixel();
    let style = TextStyle::from((FONT, 28).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(title.to_owned(), (w as i32 / 2, h as i32 / 2 - 30), style.clone()))
        .map_err(err)?;
    root.draw(&Text::new(format!("no data: {why}"), (w as i32 / 2, h as i32 / 2 + 20), style))
        .map_err(err)?;
    Ok(())
}

/// Log-scale shading: white for no access, then light yellow to dark blue as accesses grow.
pub(super) fn shade(count: u64, max: u64) -> RGBColor {
    let f = if max <= 1 { 1.0 } else { (count as f64).ln() / (max as f64).ln() };
    let f = f.clamp(0.0, 1.0);
    let (a, b) = ((255.0, 237.0, 160.0), (8.0, 29.0, 88.0));
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// A kernel's colour, by its place.
fn colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(23, 190, 207),
    ];
    COLOURS[i % COLOURS.len()]
}

/// A power of two of bytes, in words (`256 B`, `64 KiB`, `16 MiB`).
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024 && value.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

/// A time in nanoseconds, in words (`850 ns`, `12.3 µs`, `60.2 ms`, `1.5 s`).
fn duration(ns: f64) -> String {
    match ns {
        n if n < 1e3 => format!("{n:.0} ns"),
        n if n < 1e6 => format!("{:.1} µs", n / 1e3),
        n if n < 1e9 => format!("{:.1} ms", n / 1e6),
        n => format!("{:.1} s", n / 1e9),
    }
}

/// A time axis' description: device time, and how many idle stretches it cut.
fn time_desc(axis: &TimeAxis) -> String {
    match axis.stretches.len().saturating_sub(1) {
        0 => "device time (µs)".to_owned(),
        1 => "device time (µs; an idle stretch cut, grey)".to_owned(),
        n => format!("device time (µs; {n} idle stretches cut, grey)"),
    }
}

/// A tick of a time axis at `x` µs along it: the device time there, in µs.
fn tick(axis: &TimeAxis, x: f64) -> String {
    format!("{:.1}", axis.time((x.max(0.0) * 1e3) as u64) as f64 / 1e3)
}

/// The idle stretches cut from a time axis: a grey band each, up to `top`, saying how long.
fn cuts<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    axis: &TimeAxis,
    top: f64,
) -> DrawResult {
    for (from, to, idle) in axis.cuts() {
        let (from, to) = (from as f64 / 1e3, to as f64 / 1e3);
        let band = Rectangle::new([(from, 0.0), (to, top)], RGBColor(225, 225, 225).filled());
        chart.draw_series([band]).map_err(err)?;
        let style = TextStyle::from((FONT, 12).into_font())
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Center, VPos::Center));
        let at = ((from + to) / 2.0, top / 2.0);
        chart
            .draw_series([Text::new(format!("{} idle", duration(idle as f64)), at, style)])
            .map_err(err)?;
    }
    Ok(())
}

/// A kernel's name for a legend: mangled names are long.
pub(super) fn short(name: &str) -> String {
    if name.chars().count() <= 40 {
        name.to_owned()
    } else {
        format!("{}…", name.chars().take(39).collect::<String>())
    }
}

/// The heatmap: address ranges (touched only) × device time.
pub(crate) fn heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: Option<&Heatmap>,
    why: &str,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let title = "memory accesses: address ranges × device time";
    let Some(h) = data else { return no_data(root, title, why) };
    let span_us = h.time.span_ns as f64 / 1e3;
    let rows = h.rows.len();
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..span_us, 0f64..rows as f64)
        .map_err(err)?;
    let label = |y: &f64| {
        let row = (*y as usize).min(rows.saturating_sub(1));
        format!("{:#x}", h.rows[row].start)
    };
    let time = |x: &f64| tick(&h.time, *x);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(time_desc(&h.time))
        .x_label_formatter(&time)
        .y_desc(format!("address ({} ranges, touched only)", size(h.bucket)))
        .y_labels(rows.min(16))
        .y_label_formatter(&label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    let max = h.max();
    let bin_us = span_us / h.counts.first().map_or(1, Vec::len) as f64;
    let cells = h.counts.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().filter(|(_, c)| **c > 0).map(move |(b, &c)| {
            let x = b as f64 * bin_us;
            Rectangle::new([(x, r as f64), (x + bin_us, r as f64 + 1.0)], shade(c, max).filled())
        })
    });
    chart.draw_series(cells).map_err(err)?;
    // Untouched ranges collapsed between two rows: a grey line.
    let gaps = h.rows.iter().enumerate().filter(|(_, r)| r.gap_before).map(|(i, _)| {
        PathElement::new(vec![(0.0, i as f64), (span_us, i as f64)], RGBColor(190, 190, 190))
    });
    chart.draw_series(gaps).map_err(err)?;
    cuts(&mut chart, &h.time, rows as f64)?;
    for (i, m) in h.marks.iter().enumerate() {
        let c = colour(i);
        let style = c.stroke_width(2);
        let (s, e) = (h.time.at(m.start_ns) as f64 / 1e3, h.time.at(m.end_ns) as f64 / 1e3);
        chart
            .draw_series([
                PathElement::new(vec![(s, 0.0), (s, rows as f64)], style),
                PathElement::new(vec![(e, 0.0), (e, rows as f64)], style),
            ])
            .map_err(err)?
            .label(format!("launch {} of {} (start, end)", m.grid, short(&m.kernel)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    if !h.marks.is_empty() {
        legend(&mut chart)?;
    }
    let note = format!(
        "{} samples (warp requests), darkest cell {max}, log scale{}",
        h.total(),
        if h.unmarked > 0 {
            format!("; {} launches not marked", h.unmarked)
        } else {
            String::new()
        }
    );
    let (w, hgt) = root.dim_in_pixel();
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Bottom));
    root.draw(&Text::new(note, (w as i32 - 12, hgt as i32 - 4), style)).map_err(err)?;
    Ok(())
}

/// Bandwidth over time, a line per kernel launch, and the device's peak.
pub(crate) fn bandwidth<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: Option<&Bandwidth>,
    why: &str,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let title = "bandwidth over time, per kernel";
    let Some(b) = data else { return no_data(root, title, why) };
    let gb = 1e9;
    let end_us = b.time.span_ns as f64 / 1e3;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..end_us, 0f64..b.top / gb)
        .map_err(err)?;
    let time = |x: &f64| tick(&b.time, *x);
    chart
        .configure_mesh()
        .x_desc(time_desc(&b.time))
        .x_label_formatter(&time)
        .y_desc("bandwidth (GB/s)")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    cuts(&mut chart, &b.time, b.top / gb)?;
    for (i, s) in b.series.iter().enumerate() {
        let c = colour(i);
        let mut labelled = None;
        for points in &s.launches {
            let line = points.iter().map(|&(x, y)| (x, y / gb));
            labelled =
                Some(chart.draw_series(LineSeries::new(line, c.stroke_width(2))).map_err(err)?);
        }
        if let Some(series) = labelled {
            series.label(short(&s.kernel)).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
    }
    if b.peak > 0.0 {
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, b.peak / gb), (end_us, b.peak / gb)],
                8,
                5,
                red.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("device peak {:.0} GB/s", b.peak / gb))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red.stroke_width(2)));
    }
    legend(&mut chart)
}

/// The histogram of launch durations, kernels stacked, on a log axis.
pub(crate) fn durations<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: Option<&Durations>,
    why: &str,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let title = "launch durations, per kernel";
    let Some(d) = data else { return no_data(root, title, why) };
    let title = format!("{title} ({} launches)", d.total());
    let us = |ns: f64| ns / 1e3;
    let (low, high) = (us(d.edges[0]), us(d.edges[d.edges.len() - 1]));
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d((low..high).log_scale(), 0f64..(d.tallest() as f64 * 1.15).max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("launch duration (µs, log scale)")
        .y_desc("launches")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    let bins = d.edges.len() - 1;
    let mut below = vec![0u64; bins];
    for (i, (kernel, counts)) in d.kernels.iter().enumerate() {
        let c = colour(i);
        let bars: Vec<_> = (0..bins)
            .filter(|&b| counts[b] > 0)
            .map(|b| {
                let (x0, x1) = (us(d.edges[b]), us(d.edges[b + 1]));
                let (y0, y1) = (below[b] as f64, (below[b] + counts[b]) as f64);
                Rectangle::new([(x0, y0), (x1, y1)], c.filled())
            })
            .collect();
        for b in 0..bins {
            below[b] += counts[b];
        }
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(format!("{} ({} launches)", short(kernel), counts.iter().sum::<u64>()))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    legend(&mut chart)
}

/// Sampled requests per SM, kernels stacked.
pub(crate) fn sms<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: Option<&Sms>,
    why: &str,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let title = "sampled requests per SM";
    let Some(d) = data else { return no_data(root, title, why) };
    let title =
        format!("{title} ({} samples, {} of {} SMs without one)", d.total(), d.idle(), d.sms);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..f64::from(d.sms), 0f64..(d.tallest() as f64 * 1.15).max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("SM")
        .y_desc("sampled warp requests")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    let mut below = vec![0u64; d.sms as usize];
    for (i, (kernel, counts)) in d.kernels.iter().enumerate() {
        let c = colour(i);
        let bars: Vec<_> = (0..d.sms as usize)
            .filter(|&sm| counts[sm] > 0)
            .map(|sm| {
                let x = sm as f64;
                let (y0, y1) = (below[sm] as f64, (below[sm] + counts[sm]) as f64);
                Rectangle::new([(x + 0.1, y0), (x + 0.9, y1)], c.filled())
            })
            .collect();
        for (b, n) in below.iter_mut().zip(counts) {
            *b += n;
        }
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(format!("{} ({} samples)", short(kernel), counts.iter().sum::<u64>()))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    legend(&mut chart)
}
