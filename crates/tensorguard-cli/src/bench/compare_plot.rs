//! The `bench compare` plot: one row per workload, horizontal bars of
//! tensorguard's time over candle's and over PyTorch's on a log scale, with
//! the line of equal speed at 1 (left of it tensorguard is faster). PNG or
//! SVG by the file's extension; the text uses `plot`'s embedded font.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::compare_report::{CompareReport, FRAMEWORKS};
use super::plot;

const CANDLE: RGBColor = RGBColor(255, 127, 14);
const TORCH: RGBColor = RGBColor(31, 119, 180);

/// Draw the ratios of `report` into `path`.
pub fn draw(path: &Path, report: &CompareReport) -> Result<(), String> {
    let err = |e: String| format!("bench compare: can't draw the plot {}: {e}", path.display());
    plot::check_path(path)?;
    plot::ensure_font().map_err(err)?;
    let height = 140 + 26 * report.rows.len().max(1) as u32;
    let size = (1100, height);
    let svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg {
        chart(SVGBackend::new(path, size).into_drawing_area(), report).map_err(err)
    } else {
        chart(BitMapBackend::new(path, size).into_drawing_area(), report).map_err(err)
    }
}

fn chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    report: &CompareReport,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let n = report.rows.len();
    let ratios: Vec<[Option<f64>; 2]> = report
        .rows
        .iter()
        .map(|r| [report.ratio(r, 1), report.ratio(r, 2)])
        .collect();
    let all: Vec<f64> = ratios.iter().flatten().flatten().copied().collect();
    let lo = all.iter().copied().fold(1.0, f64::min) / 1.5;
    let hi = all.iter().copied().fold(1.0, f64::max) * 1.5;
    let names: Vec<String> = report.rows.iter().map(|r| r.spec.name.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tensorguard time / peer time (left of 1: tensorguard is faster)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..n as f64)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|x| {
            if *x < 0.01 {
                format!("{x:.0e}")
            } else {
                format!("{x:.2}")
            }
        })
        .x_desc("ratio (log scale)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    // the workload names, right-aligned left of their rows
    let style =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, name) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(lo, (n - 1 - i) as f64 + 0.5));
        root.draw(&Text::new(name.clone(), (px - 8, py), style.clone()))
            .map_err(e)?;
    }
    for (j, color) in [(0usize, CANDLE), (1, TORCH)] {
        let bars: Vec<Rectangle<(f64, f64)>> = ratios
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let x = r[j]?;
                // row i from the top; candle above torch within a row
                let y0 = (n - 1 - i) as f64 + if j == 0 { 0.52 } else { 0.12 };
                Some(Rectangle::new([(lo, y0), (x, y0 + 0.36)], color.filled()))
            })
            .collect();
        if bars.is_empty() {
            continue;
        }
        chart
            .draw_series(bars)
            .map_err(e)?
            .label(format!("tensorguard / {}", FRAMEWORKS[j + 1]))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            vec![(1.0, 0.0), (1.0, n as f64)],
            BLACK.stroke_width(2),
        ))
        .map_err(e)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
