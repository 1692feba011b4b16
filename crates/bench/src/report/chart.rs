//! Drawing the charts with plotters, once for a PNG (a bitmap, text rasterised from the embedded
//! font) and once for an SVG (text left to the viewer's sans-serif font).

use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{short_workload, Group, OutagePoint, RecoveryPoint, RunPoint, PERCENTILES};

/// DejaVu Sans cut down to Latin-1 and a few symbols (22 KB; see DejaVuSans-LICENSE.txt). PNG
/// text is drawn with it, so charts need no fonts installed on the machine.
static FONT: &[u8] = include_bytes!("DejaVuSans-subset.ttf");

/// The family name every text style uses; the embedded font is registered under it.
const FAMILY: &str = "sans-serif";

fn register_font() -> Result<()> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        result = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| anyhow!("the embedded chart font does not load"));
    });
    result
}

/// A chart of one group of runs.
pub enum Chart<'g, 'r> {
    /// Throughput by policy: one bar per policy (the mean of its runs, whiskers from the
    /// slowest to the fastest when there are several), labelled with the speed-up over the
    /// data store alone.
    Throughput(&'g Group<'r>),
    /// Latency percentiles by policy: a panel per action, a line per policy, log scale.
    Latency(&'g Group<'r>),
    /// Write-back's pinned memory over time (and applied share, when sampled): a line per run.
    WriteBack(&'g Group<'r>),
    /// Dirty documents and throughput over time around a data-store outage (000 Fig. 4.6): two
    /// panels on one time axis, a line per run with a timeline, the outage shaded.
    Outage(&'g Group<'r>),
    /// The failed CMIs' hit ratio over time (004 Fig. 6): a line per run, named by its Gemini
    /// variant, the failure shaded.
    Recovery(&'g Group<'r>),
}

/// Draws `chart` as a PNG file's bytes.
pub fn render_png(chart: &Chart<'_, '_>) -> Result<Vec<u8>> {
    register_font()?;
    let (width, height) = chart.size();
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        chart
            .draw(&root)
            .map_err(|e| anyhow!("drawing a chart: {e}"))?;
        root.present()
            .map_err(|e| anyhow!("drawing a chart: {e}"))?;
    }
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(bytes)
}

/// Draws `chart` as an SVG document.
pub fn render_svg(chart: &Chart<'_, '_>) -> Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, chart.size()).into_drawing_area();
        chart
            .draw(&root)
            .map_err(|e| anyhow!("drawing a chart: {e}"))?;
        root.present()
            .map_err(|e| anyhow!("drawing a chart: {e}"))?;
    }
    Ok(text)
}

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

const TITLE_SIZE: u32 = 26;
const PANEL_TITLE_SIZE: u32 = 20;
const AXIS_TITLE_SIZE: u32 = 18;
const LABEL_SIZE: u32 = 15;

/// The order policies are shown in; others follow in the order met.
const POLICY_ORDER: [&str; 5] = [
    "none",
    "cache-aside",
    "write-around",
    "write-through",
    "write-back",
];

fn policy_color(policy: &str) -> RGBColor {
    match policy {
        "none" => RGBColor(127, 127, 127),
        "cache-aside" => RGBColor(214, 39, 40),
        "write-around" => RGBColor(31, 119, 180),
        "write-through" => RGBColor(255, 127, 14),
        "write-back" => RGBColor(44, 160, 44),
        _ => RGBColor(148, 103, 189),
    }
}

fn policy_label(policy: &str) -> &str {
    if policy == "none" {
        "data store alone"
    } else {
        policy
    }
}

/// The policies of a group in display order.
fn policies<'r>(g: &Group<'r>) -> Vec<&'r str> {
    let mut list: Vec<&str> = g.runs.iter().map(|r| r.policy.as_str()).collect();
    list.sort_by_key(|p| {
        POLICY_ORDER
            .iter()
            .position(|o| o == p)
            .unwrap_or(POLICY_ORDER.len())
    });
    list.dedup();
    list
}

fn runs_of<'a, 'r>(g: &'a Group<'r>, policy: &'a str) -> impl Iterator<Item = &'r RunPoint> + 'a {
    g.runs.iter().copied().filter(move |r| r.policy == policy)
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

fn benchmark_name(benchmark: &str) -> String {
    match benchmark {
        "ycsb" => "YCSB".into(),
        "bg" => "BG".into(),
        "tpcc" => "TPC-C".into(),
        other => other.to_string(),
    }
}

fn workload_name(g: &Group<'_>) -> String {
    let name = benchmark_name(g.benchmark);
    let workload = short_workload(g.benchmark, g.workload);
    match g.benchmark {
        "bg" => format!("{name} mix {workload}"),
        "tpcc" => format!("{name} {workload}"),
        _ => format!("{name} workload {workload}"),
    }
}

fn throughput_unit(benchmark: &str) -> &'static str {
    match benchmark {
        "bg" => "actions/s",
        "tpcc" => "transactions/s",
        _ => "operations/s",
    }
}

/// `1234567.8` as `1,234,568`; below 10, one decimal.
fn with_thousands(value: f64) -> String {
    if value.abs() < 10.0 && value.fract() != 0.0 {
        return format!("{value:.1}");
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Bytes in a unit that suits the largest value: (divisor, unit name).
fn byte_unit(max: f64) -> (f64, &'static str) {
    if max >= 1024.0 * 1024.0 * 1024.0 {
        (1024.0 * 1024.0 * 1024.0, "GiB")
    } else if max >= 1024.0 * 1024.0 {
        (1024.0 * 1024.0, "MiB")
    } else if max >= 1024.0 {
        (1024.0, "KiB")
    } else {
        (1.0, "bytes")
    }
}

/// Height of the strip that holds a chart's shared legend.
const LEGEND_HEIGHT: u32 = 36;

impl Chart<'_, '_> {
    fn size(&self) -> (u32, u32) {
        match self {
            Chart::Throughput(g) => (240 + 170 * policies(g).len() as u32, 560),
            Chart::Latency(g) => {
                let (rows, cols) = latency_grid(actions(g).len());
                (40 + 460 * cols, 110 + LEGEND_HEIGHT + 380 * rows)
            }
            Chart::WriteBack(g) => {
                let panels = if has_applied_share(g) { 2 } else { 1 };
                let legend = if write_back_runs(g).len() > 1 {
                    LEGEND_HEIGHT
                } else {
                    0
                };
                (1000, 90 + legend + 400 * panels)
            }
            Chart::Outage(_) => (1000, 90 + LEGEND_HEIGHT + 400 * 2),
            Chart::Recovery(_) => (1000, 90 + LEGEND_HEIGHT + 420),
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        root.fill(&WHITE)?;
        match self {
            Chart::Throughput(g) => draw_throughput(root, g),
            Chart::Latency(g) => draw_latency(root, g),
            Chart::WriteBack(g) => draw_write_back(root, g),
            Chart::Outage(g) => draw_outage(root, g),
            Chart::Recovery(g) => draw_recovery(root, g),
        }
    }
}

/// An x axis of categories (policies, percentiles): category `i` spans `i..i + 1`, with its tick
/// and label at the centre. plotters' segmented axis would add an empty category at the end.
struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = value / self.0.max(1) as f64;
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        (0..self.0).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

/// The category an x value of [`Categories`] falls in.
fn category(x: f64) -> usize {
    x.max(0.0).floor() as usize
}

/// Grid lines: light grey at the labelled values, none between them (the finer grid made
/// charts look like graph paper).
const GRID: RGBAColor = RGBAColor(0, 0, 0, 0.12);

/// One line of legend entries (a coloured stroke and a name each), centred in `area`: one
/// legend for all the panels of a chart, outside the plots so that it covers no data.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor)],
) -> Drawn<DB> {
    const STROKE: i32 = 28;
    const GAP: i32 = 8;
    const SPACING: i32 = 30;
    let style = (FAMILY, LABEL_SIZE + 1).into_font().into_text_style(area);
    let widths: Vec<i32> = entries
        .iter()
        .map(|(name, _)| {
            area.estimate_text_size(name, &style)
                .map(|(w, _)| STROKE + GAP + w as i32)
        })
        .collect::<Result<_, _>>()?;
    let total = widths.iter().sum::<i32>() + SPACING * (entries.len() as i32 - 1).max(0);
    let (width, height) = area.dim_in_pixel();
    let middle = height as i32 / 2;
    let mut x = (width as i32 - total).max(0) / 2;
    let style = style.pos(Pos::new(HPos::Left, VPos::Center));
    for ((name, color), w) in entries.iter().zip(widths) {
        area.draw(&PathElement::new(
            vec![(x, middle), (x + STROKE, middle)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(
            name.clone(),
            (x + STROKE + GAP, middle),
            style.clone(),
        ))?;
        x += w + SPACING;
    }
    Ok(())
}

/// Splits a legend strip off the top of `area`, draws `entries` in it, and returns the rest.
fn with_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor)],
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (legend, rest) = area.split_vertically(LEGEND_HEIGHT);
    draw_legend(&legend, entries)?;
    Ok(rest)
}

fn draw_throughput<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &Group<'_>) -> Drawn<DB> {
    struct Bar<'p> {
        policy: &'p str,
        mean: f64,
        min: f64,
        max: f64,
        runs: usize,
    }
    let bars: Vec<Bar<'_>> = policies(g)
        .into_iter()
        .map(|policy| {
            let values: Vec<f64> = runs_of(g, policy).map(|r| r.throughput).collect();
            Bar {
                policy,
                mean: mean(values.iter().copied()),
                min: values.iter().copied().fold(f64::INFINITY, f64::min),
                max: values.iter().copied().fold(0.0, f64::max),
                runs: values.len(),
            }
        })
        .collect();
    let baseline = bars.iter().find(|b| b.policy == "none").map(|b| b.mean);
    let top = bars.iter().map(|b| b.max).fold(1.0, f64::max) * 1.15;
    let repeated = bars.iter().any(|b| b.runs > 1);
    let mut title = format!("{}: throughput by policy", workload_name(g));
    if repeated {
        title.push_str(" (mean of runs, whiskers min-max)");
    }
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, TITLE_SIZE))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(100)
        .build_cartesian_2d(Categories(bars.len()), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|x| {
            bars.get(category(*x))
                .map_or(String::new(), |b| policy_label(b.policy).to_string())
        })
        .y_label_formatter(&|v| with_thousands(*v))
        .x_desc("policy")
        .y_desc(format!("throughput ({})", throughput_unit(g.benchmark)))
        .label_style((FAMILY, LABEL_SIZE))
        .axis_desc_style((FAMILY, AXIS_TITLE_SIZE))
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new(
            [(x + 0.18, 0.0), (x + 0.82, b.mean)],
            policy_color(b.policy).filled(),
        )
    }))?;
    if repeated {
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64 + 0.5;
            PathElement::new(vec![(x, b.min), (x, b.max)], BLACK.stroke_width(2))
        }))?;
    }
    let above = (FAMILY, LABEL_SIZE)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let mut label = with_thousands(b.mean);
        if let (Some(base), false) = (baseline, b.policy == "none") {
            if base > 0.0 {
                label.push_str(&format!(", {:.2}×", b.mean / base));
            }
        }
        Text::new(label, (i as f64 + 0.5, b.max.max(b.mean)), above.clone())
    }))?;
    Ok(())
}

/// The actions with latencies in a group, in name order.
fn actions(g: &Group<'_>) -> Vec<String> {
    let mut list: Vec<String> = g
        .runs
        .iter()
        .flat_map(|r| r.latency_us.keys().cloned())
        .collect();
    list.sort();
    list.dedup();
    list
}

/// (rows, columns) of the latency panels: up to three a row.
fn latency_grid(panels: usize) -> (u32, u32) {
    let cols = panels.clamp(1, 3) as u32;
    (panels.max(1).div_ceil(cols as usize) as u32, cols)
}

fn draw_latency<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &Group<'_>) -> Drawn<DB> {
    let title = format!("{}: latency percentiles by policy", workload_name(g));
    let body = root.titled(&title, (FAMILY, TITLE_SIZE))?;
    let policies: Vec<&str> = policies(g)
        .into_iter()
        .filter(|&p| runs_of(g, p).any(|r| !r.latency_us.is_empty()))
        .collect();
    let body = with_legend(
        &body,
        &policies
            .iter()
            .map(|p| (policy_label(p).to_string(), policy_color(p)))
            .collect::<Vec<_>>(),
    )?;
    let actions = actions(g);
    let (rows, cols) = latency_grid(actions.len());
    let panels = body.split_evenly((rows as usize, cols as usize));
    for (action, panel) in actions.iter().zip(&panels) {
        // Per policy, the mean of each percentile over the runs that measured this action.
        let lines: Vec<(&str, [f64; 4])> = policies
            .iter()
            .filter_map(|&policy| {
                let runs: Vec<&[f64; 4]> = runs_of(g, policy)
                    .filter_map(|r| r.latency_us.get(action))
                    .collect();
                (!runs.is_empty()).then(|| {
                    let mut values = [0.0; 4];
                    for (k, value) in values.iter_mut().enumerate() {
                        // A log axis has no 0: a sub-microsecond percentile shows as 1 µs.
                        *value = mean(runs.iter().map(|v| v[k])).max(1.0);
                    }
                    (policy, values)
                })
            })
            .collect();
        let all = lines.iter().flat_map(|(_, v)| v.iter().copied());
        let low = all.clone().fold(f64::INFINITY, f64::min);
        let high = all.fold(1.0, f64::max);
        let low = 10f64.powf(low.log10().floor());
        let high = 10f64.powf((high.log10() + 1e-9).ceil()).max(low * 10.0);
        let mut chart = ChartBuilder::on(panel)
            .caption(action, (FAMILY, PANEL_TITLE_SIZE))
            .margin(14)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(Categories(PERCENTILES.len()), (low..high).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|x| {
                PERCENTILES
                    .get(category(*x))
                    .map_or(String::new(), |p| p.1.to_string())
            })
            .y_label_formatter(&|v| with_thousands(*v))
            .x_desc("percentile")
            .y_desc("latency (µs, log scale)")
            .label_style((FAMILY, LABEL_SIZE))
            .axis_desc_style((FAMILY, AXIS_TITLE_SIZE))
            .draw()?;
        for (policy, values) in &lines {
            let color = policy_color(policy);
            let points = values.iter().enumerate().map(|(i, v)| (i as f64 + 0.5, *v));
            chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))?;
            chart.draw_series(points.map(|p| Circle::new(p, 5, color.filled())))?;
        }
    }
    Ok(())
}

fn has_applied_share(g: &Group<'_>) -> bool {
    g.runs.iter().any(|r| !r.applied_share.is_empty())
}

/// The runs of a group with write-back samples.
fn write_back_runs<'r>(g: &Group<'r>) -> Vec<&'r RunPoint> {
    g.runs
        .iter()
        .copied()
        .filter(|r| !r.pinned_bytes.is_empty() || !r.applied_share.is_empty())
        .collect()
}

/// A line through `points` with a dot on each sample: runs are sampled about once a second, so
/// a short run has few points, and a single sample would otherwise not show at all.
fn draw_samples<DB: DrawingBackend, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: Vec<(f64, f64)>,
    color: RGBColor,
) -> Drawn<DB>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart.draw_series(LineSeries::new(
        points.iter().copied(),
        color.stroke_width(3),
    ))?;
    chart.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 4, color.filled())),
    )?;
    Ok(())
}

/// Colours for the runs of a chart over time, starting from write-back's.
fn run_color(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 5] = [
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(23, 190, 207),
    ];
    PALETTE[i % PALETTE.len()]
}

type TimeChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel of values over the first `end` seconds of the run, from 0 to `top`, its axes drawn.
fn time_panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    end: f64,
    top: f64,
    y_desc: &str,
) -> Result<TimeChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FAMILY, PANEL_TITLE_SIZE))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .x_desc("time into the run (s)")
        .y_desc(y_desc)
        .y_label_formatter(&|v| with_thousands(*v))
        .label_style((FAMILY, LABEL_SIZE))
        .axis_desc_style((FAMILY, AXIS_TITLE_SIZE))
        .draw()?;
    Ok(chart)
}

fn draw_write_back<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &Group<'_>) -> Drawn<DB> {
    let runs = write_back_runs(g);
    let several_policies = runs.iter().any(|r| r.policy != runs[0].policy);
    let name = |r: &RunPoint| {
        if several_policies {
            format!("{} run {}", r.policy, r.run)
        } else {
            format!("run {}", r.run)
        }
    };
    let title = format!("{}: write-back over time", workload_name(g));
    let mut body = root.titled(&title, (FAMILY, TITLE_SIZE))?;
    if runs.len() > 1 {
        let entries: Vec<(String, RGBColor)> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (name(r), run_color(i)))
            .collect();
        body = with_legend(&body, &entries)?;
    }
    let end = runs
        .iter()
        .flat_map(|r| r.pinned_bytes.iter().chain(&r.applied_share).map(|s| s.0))
        .fold(1.0, f64::max);
    let panels = if has_applied_share(g) {
        body.split_evenly((2, 1))
    } else {
        vec![body]
    };

    let max_bytes = runs
        .iter()
        .flat_map(|r| r.pinned_bytes.iter().map(|s| s.1))
        .fold(1.0, f64::max);
    let (divisor, unit) = byte_unit(max_bytes);
    let mut chart = time_panel(
        &panels[0],
        "pinned memory (buffered writes, summed over the CMIs)",
        end,
        max_bytes / divisor * 1.1,
        &format!("pinned memory ({unit})"),
    )?;
    for (i, r) in runs.iter().enumerate() {
        let points = r
            .pinned_bytes
            .iter()
            .map(|&(t, b)| (t, b / divisor))
            .collect();
        draw_samples(&mut chart, points, run_color(i))?;
    }

    if let Some(panel) = panels.get(1) {
        let mut chart = time_panel(
            panel,
            "share of buffered writes applied to the data store",
            end,
            105.0,
            "applied (%)",
        )?;
        for (i, r) in runs.iter().enumerate() {
            let points = r
                .applied_share
                .iter()
                .map(|&(t, s)| (t, s * 100.0))
                .collect();
            draw_samples(&mut chart, points, run_color(i))?;
        }
    }
    Ok(())
}

/// The runs of a group with an outage timeline.
fn outage_runs<'r>(g: &Group<'r>) -> Vec<(&'r RunPoint, &'r OutagePoint)> {
    g.runs
        .iter()
        .filter_map(|r| Some((*r, r.outage.as_ref().filter(|o| o.has_timeline())?)))
        .collect()
}

/// Names for the outage chart's runs: the policy, the TARDIS technique (in capitals, as 000
/// writes them) and its AR workers, and the run's number where two runs would otherwise share a
/// name.
fn outage_names(runs: &[(&RunPoint, &OutagePoint)]) -> Vec<String> {
    let base: Vec<String> = runs
        .iter()
        .map(|(r, o)| match (&o.tardis, o.ar_workers) {
            (Some(technique), workers) => {
                let policy = policy_label(&r.policy);
                let technique = technique.to_uppercase();
                match workers {
                    Some(n) => format!("{policy} + {technique}, {n} AR"),
                    None => format!("{policy} + {technique}"),
                }
            }
            (None, _) => policy_label(&r.policy).to_string(),
        })
        .collect();
    base.iter()
        .zip(runs)
        .map(|(name, (r, _))| {
            if base.iter().filter(|&other| other == name).count() > 1 {
                format!("{name} run {}", r.run)
            } else {
                name.clone()
            }
        })
        .collect()
}

/// The spans of the run phase in which the data store was away in at least one run: the runs of
/// a chart share an `--outage` but their cuts begin a few milliseconds apart, and overlapping
/// translucent shades would darken where they overlap. A store that never came back is away
/// until `end`.
fn outage_windows(runs: &[(&RunPoint, &OutagePoint)], end: f64) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|(_, o)| {
            let at = o.at_s?;
            Some((at, o.for_s.map_or(end, |length| at + length)))
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (from, to) in spans {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// The shade over the time the data store was away: neutral, so that it takes no run's colour.
const OUTAGE_SHADE: RGBAColor = RGBAColor(0, 0, 0, 0.1);

/// A panel of the outage chart.
struct OutageQuantity {
    caption: &'static str,
    axis: String,
    /// The least top of the axis: a chart whose runs had no dirty document (TARDIS off) would
    /// otherwise get an axis of fractions of a document.
    least: f64,
    samples: fn(&OutagePoint) -> &[(f64, f64)],
}

fn draw_outage<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &Group<'_>) -> Drawn<DB> {
    let runs = outage_runs(g);
    let title = format!("{}: data store outage over time", workload_name(g));
    let body = root.titled(&title, (FAMILY, TITLE_SIZE))?;
    // The legend even for one run: its name says which TARDIS technique (or none) it shows.
    let entries: Vec<(String, RGBColor)> = outage_names(&runs)
        .into_iter()
        .enumerate()
        .map(|(i, name)| (name, run_color(i)))
        .collect();
    let body = with_legend(&body, &entries)?;
    let panels = body.split_evenly((2, 1));
    let end = runs
        .iter()
        .flat_map(|(_, o)| o.dirty.iter().map(|s| s.0))
        .chain(runs.iter().filter_map(|(_, o)| Some(o.at_s? + o.for_s?)))
        .fold(1.0, f64::max);
    let windows = outage_windows(&runs, end);
    let down = (FAMILY, LABEL_SIZE)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let quantities = [
        OutageQuantity {
            caption: "documents with buffered writes (dirty)",
            axis: "dirty documents".into(),
            least: 10.0,
            samples: |o| &o.dirty,
        },
        OutageQuantity {
            caption: "throughput",
            axis: format!("throughput ({})", throughput_unit(g.benchmark)),
            least: 1.0,
            samples: |o| &o.ops_per_s,
        },
    ];
    for (n, (panel, q)) in panels.iter().zip(&quantities).enumerate() {
        let first = n == 0;
        let samples = q.samples;
        let top = runs
            .iter()
            .flat_map(|(_, o)| samples(o).iter().map(|s| s.1))
            .fold(q.least, f64::max)
            * 1.15;
        let mut chart = time_panel(panel, q.caption, end, top, &q.axis)?;
        let shade = |&(from, to): &(f64, f64)| {
            Rectangle::new([(from, 0.0), (to, top)], OUTAGE_SHADE.filled())
        };
        chart.draw_series(windows.iter().map(shade))?;
        if first {
            chart.draw_series(windows.iter().map(|&(from, to)| {
                Text::new("data store down", ((from + to) / 2.0, top), down.clone())
            }))?;
        }
        for (i, (_, o)) in runs.iter().enumerate() {
            draw_samples(&mut chart, samples(o).to_vec(), run_color(i))?;
        }
    }
    Ok(())
}

/// The runs of a group whose CMIs failed, with their hit-ratio timelines.
fn recovery_runs<'r>(g: &Group<'r>) -> Vec<(&'r RunPoint, &'r RecoveryPoint)> {
    g.runs
        .iter()
        .filter_map(|r| Some((*r, r.recovery.as_ref().filter(|p| !p.hit_ratio.is_empty())?)))
        .collect()
}

fn draw_recovery<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &Group<'_>) -> Drawn<DB> {
    let runs = recovery_runs(g);
    let title = format!("{}: failed cache instances' hit ratio", workload_name(g));
    let body = root.titled(&title, (FAMILY, TITLE_SIZE))?;
    let name = |r: &RunPoint, p: &RecoveryPoint| {
        let repeated = runs
            .iter()
            .filter(|(_, q)| q.recovery == p.recovery)
            .count()
            > 1;
        match repeated {
            true => format!("{} run {}", p.recovery, r.run),
            false => p.recovery.clone(),
        }
    };
    let entries: Vec<(String, RGBColor)> = runs
        .iter()
        .enumerate()
        .map(|(i, (r, p))| (name(r, p), run_color(i)))
        .collect();
    let body = with_legend(&body, &entries)?;
    let end = runs
        .iter()
        .flat_map(|(_, p)| p.hit_ratio.iter().map(|s| s.0))
        .fold(1.0, f64::max);
    let mut windows: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|(_, p)| Some((p.fail_at_s?, p.back_s.unwrap_or(end))))
        .collect();
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    windows.dedup_by(|b, a| {
        let overlaps = b.0 <= a.1;
        if overlaps {
            a.1 = a.1.max(b.1);
        }
        overlaps
    });
    let mut chart = time_panel(&body, "hits over reads", end, 100.0, "hit ratio (%)")?;
    chart.draw_series(
        windows
            .iter()
            .map(|&(from, to)| Rectangle::new([(from, 0.0), (to, 100.0)], OUTAGE_SHADE.filled())),
    )?;
    let away = (FAMILY, LABEL_SIZE)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    chart.draw_series(
        windows
            .iter()
            .map(|&(from, to)| Text::new("failed", ((from + to) / 2.0, 100.0), away.clone())),
    )?;
    for (i, (_, p)) in runs.iter().enumerate() {
        // No line across the time the instances served nothing: a segment per stretch of samples.
        let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
        for &(t, h) in &p.hit_ratio {
            match segments.last_mut() {
                Some(segment) if segment.last().is_some_and(|&(last, _)| t - last <= 1.0) => {
                    segment.push((t, 100.0 * h))
                }
                _ => segments.push(vec![(t, 100.0 * h)]),
            }
        }
        for segment in segments {
            draw_samples(&mut chart, segment, run_color(i))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(with_thousands(1_234_567.8), "1,234,568");
        assert_eq!(with_thousands(999.0), "999");
        assert_eq!(with_thousands(2.5), "2.5");
        assert_eq!(with_thousands(-12_000.0), "-12,000");
        assert_eq!(byte_unit(3.0 * 1024.0 * 1024.0), (1024.0 * 1024.0, "MiB"));
        assert_eq!(byte_unit(100.0), (1.0, "bytes"));
        assert_eq!(latency_grid(7), (3, 3));
        assert_eq!(latency_grid(2), (1, 2));
    }

    #[test]
    fn overlapping_outages_are_shaded_once() {
        let run = RunPoint {
            benchmark: "ycsb".into(),
            workload: "A".into(),
            policy: "write-through".into(),
            run: 0,
            throughput: 1.0,
            latency_us: Default::default(),
            pinned_bytes: Vec::new(),
            applied_share: Vec::new(),
            outage: None,
            recovery: None,
        };
        let outage = |at_s, for_s| OutagePoint {
            at_s,
            for_s,
            ..OutagePoint::default()
        };
        let outages = [
            outage(Some(5.25), Some(20.0)),
            outage(Some(5.0), Some(20.0)),
            outage(None, None),
            outage(Some(40.0), None),
        ];
        let runs: Vec<_> = outages.iter().map(|o| (&run, o)).collect();
        assert_eq!(
            outage_windows(&runs, 60.0),
            vec![(5.0, 25.25), (40.0, 60.0)]
        );
    }
}
