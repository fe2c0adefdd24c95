//! The `bench copy` plot: GB/s against copy size, log-log, one line per
//! kind (solid: blocking; dashed with dots: non_blocking), the memcpy
//! reference in black. PNG or SVG by the file's extension. Text uses DejaVu
//! Sans, embedded (its licence, `assets/DejaVuSans-LICENSE.txt`, allows
//! bundling and redistribution).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::report::{CopyReport, Kind};
use super::sizes::format_size;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Image size in pixels.
const SIZE: (u32, u32) = (1200, 800);

fn color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Memcpy => BLACK,
        Kind::H2dPageable => RGBColor(31, 119, 180),
        Kind::H2dPinned => RGBColor(255, 127, 14),
        Kind::D2hPageable => RGBColor(44, 160, 44),
        Kind::D2hPinned => RGBColor(214, 39, 40),
        Kind::D2d => RGBColor(148, 103, 189),
        Kind::Clone => RGBColor(140, 86, 75),
    }
}

/// Checks, before measuring, that `path` names a format we draw.
pub fn check_path(path: &Path) -> Result<(), String> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if ext == "png" || ext == "svg" {
        Ok(())
    } else {
        Err(format!(
            "bench: `{}` needs a `.png` or `.svg` extension to choose the image format.",
            path.display()
        ))
    }
}

/// Register the embedded font as `sans-serif` (once per process); every
/// plot of `bench` draws its text with it.
pub fn ensure_font() -> Result<(), String> {
    let mut font_error = None;
    REGISTER.call_once(|| {
        if register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            font_error = Some("the embedded font could not be loaded".to_string());
        }
    });
    font_error.map_or(Ok(()), Err)
}

/// Draw the report into `path` (`.png` or `.svg`).
pub fn draw(path: &Path, report: &CopyReport) -> Result<(), String> {
    let err = |e: String| format!("bench copy: can't draw the plot {}: {e}", path.display());
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    ensure_font().map_err(err)?;
    match ext.as_str() {
        "png" => chart(BitMapBackend::new(path, SIZE).into_drawing_area(), report).map_err(err),
        "svg" => chart(SVGBackend::new(path, SIZE).into_drawing_area(), report).map_err(err),
        _ => check_path(path),
    }
}

fn chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    report: &CopyReport,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let xs: Vec<f64> = report.sizes.iter().map(|&b| b as f64).collect();
    let (mut xlo, mut xhi) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(0.0, f64::max),
    );
    if !(xlo.is_finite() && xhi > 0.0) {
        return Err("there is nothing to plot".into());
    }
    if xhi <= xlo {
        (xlo, xhi) = (xlo / 2.0, xhi * 2.0);
    }
    let gbps: Vec<f64> = report.rows.iter().map(|r| r.gbps()).collect();
    let ylo = gbps.iter().copied().fold(f64::INFINITY, f64::min) / 2.0;
    let yhi = gbps.iter().copied().fold(0.0, f64::max) * 2.0;
    let title = match report.peer {
        Some(p) => format!("copy speed on {} (d2d to {p})", report.device),
        None => format!("copy speed on {}", report.device),
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (xlo / 1.25..xhi * 1.25).log_scale().base(4.0),
            (ylo..yhi).log_scale(),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("bytes per copy")
        .y_desc("GB/s")
        .x_label_formatter(&|x| format_size(x.round() as usize))
        .y_label_formatter(&|y| format!("{y:.3}"))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(e)?;
    let kinds = std::iter::once(Kind::Memcpy).chain(Kind::COPIES);
    for kind in kinds {
        for nb in [false, true] {
            let pts: Vec<(f64, f64)> = report
                .sizes
                .iter()
                .filter_map(|&b| report.get(kind, nb, b).map(|r| (b as f64, r.gbps())))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let c = color(kind);
            let label = if nb {
                format!("{} (non_blocking)", kind.name())
            } else {
                kind.name().to_string()
            };
            if nb {
                chart
                    .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, c.stroke_width(2)))
                    .map_err(e)?;
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(e)?
                    .label(label)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (8, 0)], c.stroke_width(2))
                            + PathElement::new(vec![(12, 0), (20, 0)], c.stroke_width(2))
                            + Circle::new((10, 0), 3, c.filled())
                    });
            } else {
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(e)?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
