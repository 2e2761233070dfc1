//! `--plot FILE.svg`: p50 and p99 of TTFT and ITL against the swept variable (concurrency or
//! rate), the picture that shows where a server stops scaling.
use std::path::Path;

use plotters::prelude::*;

use super::{BenchError, ClassStats, LoadMode, PointReport, Summary};

/// The series drawn, in legend order.
pub const SERIES: [&str; 4] = ["TTFT p50", "TTFT p99", "ITL p50", "ITL p99"];

/// Draws the `"all"` row of each point into an SVG file.
pub fn write_plot(points: &[PointReport], path: &Path) -> Result<(), BenchError> {
    let fail = |reason: String| BenchError::Plot {
        path: path.to_path_buf(),
        reason,
    };
    let rows: Vec<_> = points
        .iter()
        .filter_map(|p| p.all().map(|c| (p.mode.x(), c)))
        .filter(|(x, _)| x.is_finite())
        .collect();
    if rows.is_empty() {
        return Err(fail("no point with a finite concurrency or rate".into()));
    }
    let x_label = match points.first().map(|p| p.mode) {
        Some(LoadMode::Open { .. } | LoadMode::Mixed { .. }) => "request rate (req/s)",
        Some(LoadMode::Sessions { .. }) => "session rate (sessions/s)",
        _ => "concurrency",
    };
    // One curve: a quantile (in ms) of one latency, over the points that measured it.
    let curve = |latency: fn(&ClassStats) -> &Summary, quantile: fn(&Summary) -> f64| {
        rows.iter()
            .filter(|(_, c)| latency(c).count > 0)
            .map(|(x, c)| (*x, quantile(latency(c)) * 1e3))
            .collect::<Vec<(f64, f64)>>()
    };
    let series = [
        curve(|c| &c.ttft, |s| s.p50),
        curve(|c| &c.ttft, |s| s.p99),
        curve(|c| &c.itl, |s| s.p50),
        curve(|c| &c.itl, |s| s.p99),
    ];
    let (mut x_min, mut x_max) = rows
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(*x), hi.max(*x))
        });
    if x_max - x_min < 1e-9 {
        // A single point still needs an axis with some width.
        x_min -= 1.0;
        x_max += 1.0;
    }
    let y_max = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("tokenmeter bench: latency vs load", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("latency (ms)")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    let colors = [BLUE.mix(1.0), BLUE.mix(0.45), RED.mix(1.0), RED.mix(0.45)];
    for ((name, data), color) in SERIES.iter().zip(series).zip(colors) {
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(data.clone(), style))
            .map_err(|e| fail(e.to_string()))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| fail(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}
