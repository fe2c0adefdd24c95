//! The static plot: allocated (filled) and reserved (line) bytes over the
//! trace's events, linear axes, with the peak marked. Text uses DejaVu Sans,
//! embedded (its licence, `assets/DejaVuSans-LICENSE.txt`, allows bundling).

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use tensorguard::memory::format_bytes;

use super::analyze::{DeviceReport, Timeline};
use super::MemvizError;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Image size in pixels.
pub const SIZE: (u32, u32) = (1200, 600);
/// Most points drawn per series (min/max kept per column).
const COLUMNS: usize = 2400;

/// A step line through the points: each value holds until the next time.
fn steps(points: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = Vec::with_capacity(points.len() * 2);
    for (t, v) in points {
        if let Some(&(_, prev)) = out.last() {
            if prev != v {
                out.push((t, prev));
            }
        }
        out.push((t, v));
    }
    out
}

/// Per column of time steps, the minimum and maximum (so spikes survive).
fn columns(series: &[u64]) -> Vec<(f64, u64)> {
    if series.len() <= COLUMNS {
        return series
            .iter()
            .enumerate()
            .map(|(t, &v)| (t as f64, v))
            .collect();
    }
    let width = series.len().div_ceil(COLUMNS / 2);
    let mut out = Vec::with_capacity(COLUMNS + 2);
    for (c, chunk) in series.chunks(width).enumerate() {
        let t0 = (c * width) as f64;
        let (mut lo, mut hi) = ((0, u64::MAX), (0, 0));
        for (i, &v) in chunk.iter().enumerate() {
            if v < lo.1 {
                lo = (i, v);
            }
            if v >= hi.1 {
                hi = (i, v);
            }
        }
        let (a, b) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
        out.push((t0 + a.0 as f64, a.1));
        out.push((t0 + b.0 as f64, b.1));
    }
    out
}

fn err(path: &Path, e: impl std::fmt::Display) -> MemvizError {
    MemvizError::new(format!(
        "memviz --png: cannot draw {}: {e}; check that the folder exists and is writable.",
        path.display()
    ))
}

/// Picks a unit so axis labels stay short.
fn unit(max: u64) -> (f64, &'static str) {
    const UNITS: [(f64, &str); 4] = [
        (1024.0 * 1024.0 * 1024.0, "GiB"),
        (1024.0 * 1024.0, "MiB"),
        (1024.0, "KiB"),
        (1.0, "B"),
    ];
    for (scale, name) in UNITS {
        if max as f64 >= 2.0 * scale {
            return (scale, name);
        }
    }
    (1.0, "B")
}

/// Draws the plot into `path` (PNG).
pub fn write(
    path: &Path,
    tl: &Timeline,
    r: &DeviceReport,
    source: &Path,
) -> Result<(), MemvizError> {
    let mut font_error = None;
    REGISTER.call_once(|| {
        if register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            font_error = Some("the embedded font could not be loaded");
        }
    });
    if let Some(e) = font_error {
        return Err(err(path, e));
    }
    let ymax = tl.max_bytes();
    let (scale, uname) = unit(ymax);
    let xmax = (tl.allocated.len().saturating_sub(1)).max(1) as f64;
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{name}, device {}: peak {} allocated at event {}",
                tl.device,
                format_bytes(r.peak.1),
                r.peak.0
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..(ymax as f64 * 1.05 / scale))
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("trace event (time step)")
        .y_desc(format!("memory ({uname})"))
        .label_style(("sans-serif", 13))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| err(path, e))?;

    let alloc = steps(columns(&tl.allocated));
    let blue = RGBColor(78, 121, 167);
    chart
        .draw_series(
            AreaSeries::new(
                alloc.iter().map(|&(t, v)| (t, v as f64 / scale)),
                0.0,
                blue.mix(0.45),
            )
            .border_style(blue),
        )
        .map_err(|e| err(path, e))?
        .label("allocated")
        .legend(move |(x, y)| {
            Rectangle::new([(x, y - 5), (x + 16, y + 5)], blue.mix(0.6).filled())
        });
    let red = RGBColor(200, 0, 0);
    chart
        .draw_series(LineSeries::new(
            steps(columns(&tl.reserved))
                .into_iter()
                .map(|(t, v)| (t, v as f64 / scale)),
            red.stroke_width(2),
        ))
        .map_err(|e| err(path, e))?
        .label("reserved")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], red.stroke_width(2)));
    let peak = (f64::from(r.peak.0), r.peak.1 as f64 / scale);
    chart
        .draw_series(std::iter::once(Circle::new(peak, 5, BLACK.filled())))
        .map_err(|e| err(path, e))?
        .label(format!("peak {}", format_bytes(r.peak.1)))
        .legend(|(x, y)| Circle::new((x + 8, y), 4, BLACK.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))?;
    Ok(())
}
