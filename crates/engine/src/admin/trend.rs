//! The overview's trend: per source, deliveries per minute over the last
//! hour and per hour over the last day, stacked by [`Series`], drawn as
//! inline SVG (no script, no external asset) from `delivery_trend`.
//! Refusals are stacked on top in red, so that a spike (a rotated secret
//! not yet deployed, a prober) shows at a glance.

use std::fmt::Write;

use super::html::{escape, num, table, td};
use super::queries::TrendRows;
use crate::stats::Series;

/// One bar: a count per series, in [`Series::ALL`] order.
type Bar = [i64; Series::ALL.len()];

/// A source's bars: the last 60 minutes, then the last 24 hours, oldest
/// first, the current (partial) minute and hour last.
#[derive(Debug, PartialEq, Eq)]
pub struct SourceTrend {
    pub source: String,
    pub minutes: Vec<Bar>,
    pub hours: Vec<Bar>,
}

const MINUTES: i64 = 60;
const HOURS: i64 = 24;

/// Sorts the rows into bars per source, as of `now_minute` (minutes since
/// the epoch). Rows outside the window or of an unknown series are skipped.
pub fn build(rows: &TrendRows, now_minute: i64) -> Vec<SourceTrend> {
    let mut trends: Vec<SourceTrend> = Vec::new();
    let first_minute = now_minute - (MINUTES - 1);
    let first_hour = now_minute.div_euclid(60) - (HOURS - 1);
    let windows = [
        (&rows.minutes, first_minute, false),
        (&rows.hours, first_hour, true),
    ];
    for (rows, first, hourly) in windows {
        for (at, source, series, value) in rows {
            let (Some(series), Ok(slot)) = (
                Series::ALL.iter().position(|s| s.name() == series),
                usize::try_from(at - first),
            ) else {
                continue;
            };
            let trend = of_source(&mut trends, source);
            let bars = if hourly {
                &mut trend.hours
            } else {
                &mut trend.minutes
            };
            if let Some(bar) = bars.get_mut(slot) {
                bar[series] += value;
            }
        }
    }
    trends.sort_by(|a, b| a.source.cmp(&b.source));
    trends
}

/// `source`'s trend, added (all zeros) if it is not there yet.
fn of_source<'a>(trends: &'a mut Vec<SourceTrend>, source: &str) -> &'a mut SourceTrend {
    let index = match trends.iter().position(|t| t.source == source) {
        Some(index) => index,
        None => {
            trends.push(SourceTrend {
                source: source.to_string(),
                minutes: vec![[0; Series::ALL.len()]; MINUTES as usize],
                hours: vec![[0; Series::ALL.len()]; HOURS as usize],
            });
            trends.len() - 1
        }
    };
    &mut trends[index]
}

/// The fill of each series, in [`Series::ALL`] order.
const COLOURS: [&str; Series::ALL.len()] = ["#2f855a", "#a0aec0", "#d69e2e", "#6b46c1", "#c53030"];

/// The trend section: a legend, then a row per source with both charts and
/// its refusals in the last hour. Times are UTC.
pub fn section(trends: &[SourceTrend], now_minute: i64) -> String {
    let legend: String = Series::ALL
        .iter()
        .zip(COLOURS)
        .map(|(series, colour)| {
            format!(
                r#"<svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{colour}"/></svg> {} "#,
                series.name()
            )
        })
        .collect();
    let refused = Series::ALL.iter().position(|s| *s == Series::Refused);
    let rows: Vec<Vec<String>> = trends
        .iter()
        .map(|t| {
            let refused_last_hour: i64 = t.minutes.iter().filter_map(|b| b.get(refused?)).sum();
            let minute_label = |slot: usize| clock_label(now_minute - (MINUTES - 1) + slot as i64);
            let hour_label = |slot: usize| {
                clock_label((now_minute.div_euclid(60) - (HOURS - 1) + slot as i64) * 60)
            };
            vec![
                td(format!("<code>{}</code>", escape(&t.source))),
                td(chart(&t.minutes, 6, "minute", &minute_label)),
                td(chart(&t.hours, 15, "hour", &hour_label)),
                if refused_last_hour > 0 {
                    format!(r#"<td class="n bad"><strong>{refused_last_hour}</strong></td>"#)
                } else {
                    num(0)
                },
            ]
        })
        .collect();
    format!(
        r#"<p class="muted">Deliveries per source, stacked by outcome ({legend}); failed counts events that gave up. UTC.</p>{}"#,
        table(
            &[
                "source",
                "last hour, per minute",
                "last day, per hour",
                "refused, last hour"
            ],
            &rows
        )
    )
}

/// `HH:MM` of a minute since the epoch, UTC.
fn clock_label(minute: i64) -> String {
    let of_day = minute.rem_euclid(24 * 60);
    format!("{:02}:{:02}", of_day / 60, of_day % 60)
}

const CHART_HEIGHT: i64 = 48;

/// Stacked bars, `width` px each, scaled to the tallest; each bar says its
/// counts on hover (`<title>`), each segment its series and count to tests
/// (`data-*`).
fn chart(bars: &[Bar], width: i64, per: &str, label: &dyn Fn(usize) -> String) -> String {
    let peak = bars
        .iter()
        .map(|b| b.iter().sum::<i64>())
        .max()
        .unwrap_or(0);
    let scale = peak.max(1);
    let total_width = width * bars.len() as i64;
    let mut svg = format!(
        r##"<svg class="trend" width="{total_width}" height="{CHART_HEIGHT}" viewBox="0 0 {total_width} {CHART_HEIGHT}" role="img" aria-label="peak {peak} per {per}"><line x1="0" y1="{y}" x2="{total_width}" y2="{y}" stroke="#e3e6ec"/>"##,
        y = CHART_HEIGHT - 1
    );
    // Each segment is proportional within the height less a pixel per
    // series, plus that pixel: a count of 1 under a peak of thousands still
    // shows, and the bar never leaves the chart.
    let proportional = CHART_HEIGHT - Series::ALL.len() as i64;
    for (slot, bar) in bars.iter().enumerate() {
        if bar.iter().all(|n| *n <= 0) {
            continue;
        }
        // One hover title per bar, over its segments.
        let summary: Vec<String> = Series::ALL
            .iter()
            .zip(bar)
            .filter(|(_, n)| **n > 0)
            .map(|(series, n)| format!("{n} {}", series.name()))
            .collect();
        let _ = write!(
            svg,
            "<g><title>{} UTC: {}</title>",
            label(slot),
            summary.join(", ")
        );
        let x = slot as i64 * width;
        let mut bottom = 0;
        for ((series, colour), n) in Series::ALL.iter().zip(COLOURS).zip(bar) {
            if *n <= 0 {
                continue;
            }
            let height = 1 + proportional * n / scale;
            let top = bottom + height;
            let _ = write!(
                svg,
                r#"<rect x="{x}" y="{}" width="{}" height="{height}" fill="{colour}" data-series="{}" data-n="{n}"/>"#,
                CHART_HEIGHT - top,
                (width - 1).max(1),
                series.name(),
            );
            bottom = top;
        }
        svg.push_str("</g>");
    }
    let _ = write!(
        svg,
        "</svg><br><small class=\"muted\">peak {peak} per {per}</small>"
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(minutes: &[(i64, &str, &str, i64)], hours: &[(i64, &str, &str, i64)]) -> TrendRows {
        let own = |rows: &[(i64, &str, &str, i64)]| {
            rows.iter()
                .map(|(at, source, series, n)| (*at, source.to_string(), series.to_string(), *n))
                .collect()
        };
        TrendRows {
            minutes: own(minutes),
            hours: own(hours),
        }
    }

    #[test]
    fn rows_fall_into_their_bars_and_the_rest_is_skipped() {
        let now = 1_000_000; // a minute since the epoch
        let trends = build(
            &rows(
                &[
                    (now, "beta", "refused", 7),
                    (now - 59, "beta", "processed", 2),
                    (now - 60, "beta", "processed", 100),
                    (now + 1, "beta", "processed", 100),
                    (now, "beta", "launched", 100),
                    (now, "alpha", "duplicate", 1),
                ],
                &[
                    (now / 60, "beta", "refused", 9),
                    (now / 60 - 23, "beta", "failed", 1),
                ],
            ),
            now,
        );
        assert_eq!(trends.len(), 2);
        assert_eq!(trends[0].source, "alpha", "sorted by source");
        let beta = &trends[1];
        assert_eq!(beta.minutes[59], [0, 0, 0, 0, 7]);
        assert_eq!(beta.minutes[0], [2, 0, 0, 0, 0]);
        assert_eq!(
            beta.minutes.iter().flatten().sum::<i64>(),
            9,
            "out of window: skipped"
        );
        assert_eq!(beta.hours[23], [0, 0, 0, 0, 9]);
        assert_eq!(beta.hours[0], [0, 0, 0, 1, 0]);
    }

    #[test]
    fn a_refusal_spike_is_drawn_on_top_in_red_and_counted() {
        let now = 1_000_000;
        let trends = build(
            &rows(
                &[
                    (now - 1, "beta", "processed", 3),
                    (now, "beta", "refused", 40),
                ],
                &[],
            ),
            now,
        );
        let html = section(&trends, now);
        assert!(
            html.contains(r##"fill="#c53030" data-series="refused" data-n="40""##),
            "{html}"
        );
        assert!(html.contains(r#"<td class="n bad"><strong>40</strong></td>"#));
        assert!(html.contains("peak 40 per minute"));
        // The spike fills the chart but for a pixel per series; 3 under a
        // peak of 40 is 1 + 3 px.
        assert!(
            html.contains(r##"y="4" width="5" height="44" fill="#c53030""##),
            "{html}"
        );
        assert!(
            html.contains(r##"y="44" width="5" height="4" fill="#2f855a""##),
            "{html}"
        );
        assert!(html.contains("<title>"), "{html}");
    }

    #[test]
    fn segments_stack_without_overlap_and_stay_in_the_chart() {
        let bars = [[98, 1, 0, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]];
        let svg = chart(&bars, 6, "minute", &|_| String::new());
        let attr = |rect: &str, name: &str| -> i64 {
            let start = rect.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            rect[start..].split('"').next().unwrap().parse().unwrap()
        };
        for x in [0, 6] {
            let rects: Vec<&str> = svg
                .split("<rect ")
                .skip(1)
                .filter(|r| r.starts_with(&format!("x=\"{x}\"")))
                .collect();
            assert_eq!(rects.len(), if x == 0 { 4 } else { 5 });
            let mut below = CHART_HEIGHT;
            for rect in rects {
                let (y, height) = (attr(rect, "y"), attr(rect, "height"));
                assert!(height >= 1 && y >= 0, "{rect}");
                assert_eq!(y + height, below, "each on the one below: {rect}");
                below = y;
            }
        }
        assert!(!svg.contains(r#"x="12""#), "an empty bar draws nothing");
    }

    #[test]
    fn a_source_name_is_escaped_and_labels_are_utc_clock_times() {
        let trends = build(&rows(&[(60, "<b>", "processed", 1)], &[]), 60);
        assert!(section(&trends, 60).contains("<code>&lt;b&gt;</code>"));
        assert_eq!(clock_label(0), "00:00");
        assert_eq!(clock_label(24 * 60 + 61), "01:01");
        assert_eq!(clock_label(-1), "23:59");
    }
}
