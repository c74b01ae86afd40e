//! `egpu mem render`: pictures of recordings, without a GPU.
//!
//! Each recording gives a folder of `report.txt` (the table of `egpu mem report`, and a line per
//! picture that had nothing to draw), `heatmap`, `bandwidth`, `durations`, `sms` and `allocations` as
//! `.png` and `.svg`, and `index.html`, which shows the table and the pictures (static: no server, no
//! script). One recording is rendered into the folder named; several into a sub-folder each,
//! named after the recording's file, and an `index.html` linking them.
//!
//! | module | holds |
//! |---|---|
//! | `allocs.rs` | the `allocations` picture: its data and its drawing |
//! | `data.rs` | the data behind each picture: binned counts, axis ranges, launches marked |
//! | `draw.rs` | the pictures, drawn with plotters on either backend |
//! | `mod.rs` | the files: reading recordings, PNG encoding, `report.txt`, `index.html` |
//!
//! Text in the pictures uses DejaVu Sans, embedded (`assets/`, its licence beside it) and
//! given to plotters through `ab_glyph`: nothing depends on the system's fonts.

mod allocs;
pub(crate) mod data;
mod draw;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use egpu::host::mem::{Recording, RecordingError, table};
use plotters::prelude::*;

/// The embedded font.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The pictures, by file stem, in the order `index.html` shows them.
pub(crate) const PICTURES: [&str; 5] = ["heatmap", "bandwidth", "durations", "sms", "allocations"];

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RenderError {
    /// A recording could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The recording.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A recording is not one.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The recording.
        path: PathBuf,
        /// Why.
        #[source]
        source: RecordingError,
    },
    /// An output could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Plotters failed to draw or the PNG to encode.
    #[error("drawing `{picture}`: {reason}")]
    Draw {
        /// The picture.
        picture: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The embedded font was refused.
    #[error("the embedded font DejaVu Sans could not be loaded")]
    Font,
}

/// Registers the embedded font as plotters' `sans-serif` (once).
fn register_font() -> Result<(), RenderError> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if *ok { Ok(()) } else { Err(RenderError::Font) }
}

/// Reads a recording.
pub(crate) fn read(path: &Path) -> Result<Recording, RenderError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| RenderError::Read { path: path.to_owned(), source })?;
    Recording::parse(&text).map_err(|source| RenderError::Parse { path: path.to_owned(), source })
}

/// What of `recording` concerns the kernels whose names `kernels` matches: those kernels, and
/// their launches, sites, windows and samples.
pub(crate) fn select(mut recording: Recording, kernels: &regex_lite::Regex) -> Recording {
    recording.kernels.retain(|k| kernels.is_match(&k.name));
    let ids: std::collections::BTreeSet<String> =
        recording.kernels.iter().map(|k| k.id.clone()).collect();
    recording.launches.retain(|l| ids.contains(&l.kernel));
    recording.sites.retain(|s| ids.contains(&s.kernel));
    recording.windows.retain(|w| ids.contains(&w.kernel));
    recording.samples.retain(|s| ids.contains(&s.kernel));
    recording
}

/// Renders the recordings at `paths` into `out`: one into `out` itself, several into a
/// sub-folder each (the recording's file stem) with an `index.html` linking them; with
/// `kernels`, only the kernels it matches ([`select`]). Returns the folders written.
pub(crate) fn render_files(
    paths: &[PathBuf],
    out: &Path,
    kernels: Option<&regex_lite::Regex>,
) -> Result<Vec<PathBuf>, RenderError> {
    let recordings = paths
        .iter()
        .map(|p| read(p).map(|r| (p, if let Some(k) = kernels { select(r, k) } else { r })))
        .collect::<Result<Vec<_>, _>>()?;
    create(out)?;
    let of = recordings.len();
    if let [(path, recording)] = recordings.as_slice() {
        eprintln!("egpu: rendering 1 of 1: {} into {}", path.display(), out.display());
        render_counted(recording, out, Some((1, 1)))?;
        return Ok(vec![out.to_owned()]);
    }
    let mut folders = Vec::new();
    let mut html = page_start("egpu mem recordings");
    html.push_str("<ul>\n");
    for (n, (path, recording)) in recordings.iter().enumerate() {
        let stem = path.file_stem().map_or_else(|| "recording".into(), |s| s.to_string_lossy());
        let mut name = stem.into_owned();
        // Two recordings of the same name (from different folders) get different folders.
        while folders.iter().any(|f: &PathBuf| f.ends_with(&name)) {
            name.push('_');
        }
        let dir = out.join(&name);
        eprintln!("egpu: rendering {} of {of}: {} into {}", n + 1, path.display(), dir.display());
        render_counted(recording, &dir, Some((n + 1, of)))?;
        let _ = writeln!(
            html,
            "<li><a href=\"{0}/index.html\">{0}</a>: {1}</li>",
            escape(&name),
            escape(&describe(recording))
        );
        folders.push(dir);
    }
    html.push_str("</ul>\n</body>\n</html>\n");
    write(&out.join("index.html"), html.as_bytes())?;
    Ok(folders)
}

/// One line about a recording: its process, device and command.
fn describe(recording: &Recording) -> String {
    let h = &recording.header;
    format!(
        "process {} on {} ({})",
        h.pid,
        if h.device.is_empty() { "no device" } else { &h.device },
        h.command
    )
}

fn create(dir: &Path) -> Result<(), RenderError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| RenderError::Write { path: dir.to_owned(), source })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), RenderError> {
    std::fs::write(path, bytes)
        .map_err(|source| RenderError::Write { path: path.to_owned(), source })
}

/// What a recording lacks for each picture: `None` where it has data.
pub(crate) fn missing(recording: &Recording) -> [Option<&'static str>; 5] {
    let no_samples = recording.samples.is_empty().then_some("no samples: run with --sets timeline");
    [
        no_samples,
        recording.windows.is_empty().then_some("no windows: run with --sets timeline"),
        recording.launches.is_empty().then_some("no launches timed: run with --sets timing"),
        no_samples,
        (recording.allocations.is_empty() && recording.alloc_traffic.is_empty())
            .then_some("no allocations: run with --sets allocs"),
    ]
}

/// Renders `recording` into `dir`: `report.txt`, the pictures, `index.html`; quietly.
#[cfg(test)]
pub(crate) fn render(recording: &Recording, dir: &Path) -> Result<(), RenderError> {
    render_counted(recording, dir, None)
}

/// Renders `recording` into `dir`, and with `progress` (this recording's number and how many
/// there are) says on stderr which picture it draws: `egpu: rendering 2 of 3: heatmap`.
/// Always, terminal or not: a line per picture is little, and stdout is left to the results.
fn render_counted(
    recording: &Recording,
    dir: &Path,
    progress: Option<(usize, usize)>,
) -> Result<(), RenderError> {
    register_font()?;
    create(dir)?;
    let missing = missing(recording);
    let mut report = table::render(recording);
    for (picture, why) in PICTURES.iter().zip(missing) {
        if let Some(why) = why {
            let _ = writeln!(report, "{picture}: {why}");
        }
    }
    write(&dir.join("report.txt"), report.as_bytes())?;
    let heatmap = data::heatmap(recording);
    let bandwidth = data::bandwidth(recording);
    let durations = data::durations(recording);
    let sms = data::sms(recording);
    let allocations = allocs::allocations(recording);
    for (picture, why) in PICTURES.iter().zip(missing) {
        if let Some((n, of)) = progress {
            eprintln!("egpu: rendering {n} of {of}: {picture}");
        }
        let why = why.unwrap_or_default();
        let draw = |svg: bool, buffer: &mut Vec<u8>, text: &mut String| -> Result<(), String> {
            macro_rules! on {
                ($root:expr) => {{
                    let root = $root.into_drawing_area();
                    match *picture {
                        "heatmap" => draw::heatmap(&root, heatmap.as_ref(), why),
                        "bandwidth" => draw::bandwidth(&root, bandwidth.as_ref(), why),
                        "durations" => draw::durations(&root, durations.as_ref(), why),
                        "sms" => draw::sms(&root, sms.as_ref(), why),
                        _ => allocs::draw(&root, allocations.as_ref(), why),
                    }?;
                    root.present().map_err(|e| format!("{e:?}"))
                }};
            }
            if svg {
                on!(SVGBackend::with_string(text, draw::SIZE))
            } else {
                on!(BitMapBackend::with_buffer(buffer, draw::SIZE))
            }
        };
        let failed = |reason| RenderError::Draw { picture, reason };
        let mut svg = String::new();
        draw(true, &mut Vec::new(), &mut svg).map_err(failed)?;
        write(&dir.join(format!("{picture}.svg")), svg.as_bytes())?;
        let (w, h) = draw::SIZE;
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        draw(false, &mut rgb, &mut String::new()).map_err(failed)?;
        let png = encode_png(&rgb, draw::SIZE).map_err(|e| failed(e.to_string()))?;
        write(&dir.join(format!("{picture}.png")), &png)?;
    }
    write(&dir.join("index.html"), index(recording, &report).as_bytes())?;
    Ok(())
}

/// An RGB buffer as a PNG file.
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(bytes)
}

/// `text` with HTML's special characters escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page_start(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em;\
         overflow-x:auto}}img{{max-width:100%;border:1px solid #ddd;margin:1em 0}}</style>\n\
         </head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    )
}

/// The page of one recording: the table, then the pictures.
fn index(recording: &Recording, report: &str) -> String {
    let mut html = page_start(&format!("egpu mem: {}", describe(recording)));
    let _ = writeln!(html, "<pre>{}</pre>", escape(report));
    for picture in PICTURES {
        let _ = writeln!(
            html,
            "<h2>{picture}</h2>\n<a href=\"{picture}.png\"><img src=\"{picture}.svg\" alt=\"{picture}\"></a>"
        );
    }
    html.push_str("</body>\n</html>\n");
    html
}
