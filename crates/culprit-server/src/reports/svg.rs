//! Charts as inline SVG, for the HTML reports: a line chart of values over
//! time, horizontal bars, and a timeline. No script, no external resource:
//! a page is one file that any browser (or mail client) shows.
//!
//! Every mark carries its number in `data-*` attributes and a `<title>`
//! (the tooltip), so the page can be checked against SQL and read by a
//! screen reader.

use std::fmt::Write;

/// Okabe and Ito's palette, distinguishable with every common colour
/// blindness.
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

const WIDTH: f64 = 760.0;

/// Escapes text for HTML and SVG (element text and attribute values).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A number as people read it: at most 4 significant digits, no
/// exponent below a million.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if a >= 1e6 {
        return format!("{v:.3e}");
    }
    let decimals = if a >= 1000.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 10.0 {
        2
    } else if a >= 1.0 {
        3
    } else {
        // Four significant digits.
        (3 - a.log10().floor() as i32).clamp(0, 9) as usize
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A "nice" upper bound and tick step for values up to `max`.
fn nice_axis(max: f64) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.25);
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// A time (µs since the epoch, UTC) as an axis label: the time of day,
/// with the date when the axis spans days, and tenths when it spans
/// seconds.
fn time_label(us: i64, span_us: i64) -> String {
    let Some(t) = chrono::DateTime::from_timestamp_micros(us) else {
        return us.to_string();
    };
    if span_us > 2 * 86_400_000_000 {
        t.format("%m-%d %H:%M").to_string()
    } else if span_us > 600_000_000 {
        t.format("%H:%M").to_string()
    } else if span_us > 20_000_000 {
        t.format("%H:%M:%S").to_string()
    } else {
        // chrono has no one-digit fraction: tenths by hand.
        format!(
            "{}.{}",
            t.format("%H:%M:%S"),
            t.timestamp_subsec_millis() / 100
        )
    }
}

/// A time as RFC 3339 (µs), for `data-*` attributes.
pub fn rfc3339(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_else(|| us.to_string())
}

/// A tick step for a time axis of `span` µs: about six ticks on round
/// times.
fn time_step(span: i64) -> i64 {
    const STEPS: [i64; 22] = [
        100_000,
        200_000,
        500_000,
        1_000_000,
        2_000_000,
        5_000_000,
        10_000_000,
        15_000_000,
        30_000_000,
        60_000_000,
        120_000_000,
        300_000_000,
        600_000_000,
        900_000_000,
        1_800_000_000,
        3_600_000_000,
        7_200_000_000,
        10_800_000_000,
        21_600_000_000,
        43_200_000_000,
        86_400_000_000,
        604_800_000_000,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 7)
        .unwrap_or(span.max(1) / 6 + 1)
}

/// One line of a [`line_chart`]: its name and its points (time in µs,
/// value).
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// A chart's frame: the `<figure>` with its id, an SVG of `height`, its
/// title and caption.
fn figure(id: &str, title: &str, caption: &str, height: f64, body: &str) -> String {
    format!(
        "<figure id=\"{id}\" class=\"chart\">\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" \
         aria-labelledby=\"{id}-title\">\n<title id=\"{id}-title\">{}</title>\n{body}</svg>\n\
         <figcaption>{}</figcaption>\n</figure>\n",
        escape(title),
        escape(caption)
    )
}

/// Lines over time: `series` on a shared time axis from `from` to `to`
/// (µs), the y axis from 0 (or `y_max` when given, e.g. 1 for a DOR).
pub fn line_chart(
    id: &str,
    title: &str,
    caption: &str,
    y_label: &str,
    series: &[Series],
    (from, to): (i64, i64),
    y_max: Option<f64>,
) -> String {
    let (left, right, top, bottom) = (64.0, 180.0, 16.0, 44.0);
    let height = 300.0;
    let plot_w = WIDTH - left - right;
    let plot_h = height - top - bottom;
    let span = (to - from).max(1);
    let data_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let (y_top, y_step) = nice_axis(y_max.unwrap_or(data_max).max(data_max));
    let x = |t: i64| left + (t - from) as f64 / span as f64 * plot_w;
    let y = |v: f64| top + plot_h - (v / y_top).clamp(0.0, 1.0) * plot_h;
    let mut b = String::new();
    // Grid and y axis.
    let mut v = 0.0;
    while v <= y_top * 1.000_001 {
        let yy = y(v);
        let _ = writeln!(
            b,
            "<line class=\"grid\" x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text class=\"tick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
            left + plot_w,
            left - 6.0,
            yy + 4.0,
            number(v)
        );
        v += y_step;
    }
    // X axis.
    let step = time_step(span);
    let mut t = from.div_euclid(step) * step;
    if t < from {
        t += step;
    }
    while t <= to {
        let xx = x(t);
        let _ = writeln!(
            b,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#999\"/>\
             <text class=\"tick\" x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            top + plot_h,
            top + plot_h + 4.0,
            top + plot_h + 17.0,
            time_label(t, span)
        );
        t += step;
    }
    let _ = writeln!(
        b,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#333\"/>\
         <text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">time (UTC)</text>\
         <text class=\"axis-label\" x=\"14\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" \
         transform=\"rotate(-90 14 {})\">{}</text>",
        left + plot_w,
        top + plot_h,
        top + plot_h,
        left + plot_w / 2.0,
        height - 6.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let name = escape(&s.name);
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let _ = writeln!(
            b,
            "<g class=\"series\" data-series=\"{name}\"><polyline fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        for (t, v) in &s.points {
            let _ = writeln!(
                b,
                "<circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\" \
                 data-series=\"{name}\" data-x=\"{}\" data-value=\"{v}\"><title>{name} at {}: {}</title></circle>",
                x(*t),
                y(*v),
                rfc3339(*t),
                time_label(*t, span),
                number(*v)
            );
        }
        b.push_str("</g>\n");
        // Legend.
        let ly = top + 8.0 + i as f64 * 18.0;
        let lx = left + plot_w + 14.0;
        let _ = writeln!(
            b,
            "<rect class=\"legend\" x=\"{lx}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
             <text class=\"legend\" x=\"{}\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            ly - 10.0,
            lx + 17.0,
            ly,
            escape(&truncate(&s.name, 22))
        );
    }
    if series.is_empty() {
        let _ = writeln!(
            b,
            "<text class=\"empty\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">nothing to show</text>",
            left + plot_w / 2.0,
            top + plot_h / 2.0
        );
    }
    figure(id, title, caption, height, &b)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// Horizontal bars, one per `(label, value)`, in the order given.
pub fn bar_chart(
    id: &str,
    title: &str,
    caption: &str,
    value_label: &str,
    bars: &[(String, f64)],
) -> String {
    let (left, right, top) = (170.0, 90.0, 10.0);
    let row = 22.0;
    let plot_w = WIDTH - left - right;
    let height = top + row * bars.len().max(1) as f64 + 40.0;
    let max = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let (x_top, _) = nice_axis(max);
    let mut b = String::new();
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = top + i as f64 * row;
        let w = if value.is_finite() {
            (value / x_top).clamp(0.0, 1.0) * plot_w
        } else {
            0.0
        };
        let colour = PALETTE[0];
        let l = escape(label);
        let _ = writeln!(
            b,
            "<text class=\"label\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\">{}</text>\
             <rect class=\"bar\" x=\"{left}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{}\" fill=\"{colour}\" \
             data-label=\"{l}\" data-value=\"{value}\"><title>{l}: {}</title></rect>\
             <text class=\"value\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            left - 8.0,
            y + row * 0.68,
            escape(&truncate(label, 24)),
            y + 3.0,
            w.max(1.0),
            row - 6.0,
            number(*value),
            left + w + 6.0,
            y + row * 0.68,
            number(*value)
        );
    }
    let axis_y = top + row * bars.len().max(1) as f64;
    let _ = writeln!(
        b,
        "<line x1=\"{left}\" x2=\"{left}\" y1=\"{top}\" y2=\"{axis_y}\" stroke=\"#333\"/>\
         <text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>",
        left + plot_w / 2.0,
        axis_y + 24.0,
        escape(value_label)
    );
    if bars.is_empty() {
        let _ = writeln!(
            b,
            "<text class=\"empty\" x=\"{}\" y=\"{}\" font-size=\"13\">nothing to show</text>",
            left + 10.0,
            top + 15.0
        );
    }
    figure(id, title, caption, height, &b)
}

/// One bar of a [`timeline`]: a label, its interval (µs) and whether it
/// is highlighted (on the critical path).
pub struct Span {
    pub label: String,
    pub start: i64,
    pub end: i64,
    pub highlight: bool,
}

/// A timeline: one row per span, on a time axis measured from `origin`
/// (µs), in seconds.
pub fn timeline(id: &str, title: &str, caption: &str, spans: &[Span], origin: i64) -> String {
    let (left, right, top) = (170.0, 30.0, 10.0);
    let row = 22.0;
    let plot_w = WIDTH - left - right;
    let height = top + row * spans.len().max(1) as f64 + 44.0;
    let lo = spans
        .iter()
        .map(|s| s.start)
        .min()
        .unwrap_or(origin)
        .min(origin);
    let hi = spans
        .iter()
        .map(|s| s.end)
        .max()
        .unwrap_or(lo + 1)
        .max(lo + 1);
    let seconds = (hi - lo) as f64 / 1e6;
    let (x_top, x_step) = nice_axis(seconds);
    let x = |t: i64| left + ((t - lo) as f64 / 1e6 / x_top) * plot_w;
    let mut b = String::new();
    let axis_y = top + row * spans.len().max(1) as f64;
    let mut s = 0.0;
    while s <= x_top * 1.000_001 {
        let xx = left + s / x_top * plot_w;
        let _ = writeln!(
            b,
            "<line class=\"grid\" x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{top}\" y2=\"{axis_y}\" stroke=\"#ddd\"/>\
             <text class=\"tick\" x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">+{} s</text>",
            axis_y + 14.0,
            number(s)
        );
        s += x_step;
    }
    for (i, sp) in spans.iter().enumerate() {
        let y = top + i as f64 * row;
        let colour = if sp.highlight { PALETTE[3] } else { "#9aa7b1" };
        let l = escape(&sp.label);
        let secs = (sp.end - sp.start) as f64 / 1e6;
        let _ = writeln!(
            b,
            "<text class=\"label\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\">{}</text>\
             <rect class=\"span\" x=\"{:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{}\" fill=\"{colour}\" \
             data-label=\"{l}\" data-start=\"{}\" data-end=\"{}\" data-critical=\"{}\">\
             <title>{l}: {} s from +{} s{}</title></rect>",
            left - 8.0,
            y + row * 0.68,
            escape(&truncate(&sp.label, 24)),
            x(sp.start),
            y + 3.0,
            (x(sp.end) - x(sp.start)).max(1.0),
            row - 6.0,
            rfc3339(sp.start),
            rfc3339(sp.end),
            sp.highlight,
            number(secs),
            number((sp.start - lo) as f64 / 1e6),
            if sp.highlight {
                " (critical path)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        b,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{axis_y}\" y2=\"{axis_y}\" stroke=\"#333\"/>\
         <text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">seconds from {}</text>",
        left + plot_w,
        left + plot_w / 2.0,
        axis_y + 34.0,
        escape(&rfc3339(lo))
    );
    figure(id, title, caption, height, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(129.6311), "129.6");
        assert_eq!(number(0.949443), "0.9494");
        assert_eq!(number(0.0012346), "0.001235");
        assert_eq!(number(5.0), "5");
        assert_eq!(number(12345.6), "12346");
        assert_eq!(number(-2.5), "-2.5");
    }

    #[test]
    fn axes_are_round() {
        assert_eq!(nice_axis(0.96), (1.0, 0.25));
        assert_eq!(nice_axis(129.6), (150.0, 50.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.25));
        assert_eq!(time_step(9_000_000), 2_000_000);
        assert_eq!(time_label(19_650_000, 9_000_000), "00:00:19.6");
        assert_eq!(time_label(3_600_000_000, 3_600_000_000), "01:00");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
        let chart = bar_chart("b", "<t>", "c", "s", &[("<script>".into(), 1.0)]);
        assert!(!chart.contains("<script>"), "{chart}");
        assert!(chart.contains("data-label=\"&lt;script&gt;\""));
    }
}
