//! What `status` prints as text.

use super::report::{Configuration, Listing, Report};
use crate::plugin::{Color, paint};
use crate::text::printable;

pub(super) fn print_text(report: &Report) {
    let s = |text: &str| printable(text).into_owned();
    print_configurations(&report.configurations);
    let policy = &report.policy;
    println!(
        "Policy: {} (mode {}, break-glass {})",
        s(&policy.from),
        policy.mode,
        if policy.break_glass_enabled {
            "enabled"
        } else {
            "disabled"
        }
    );
    println!("Metrics: {}", s(&report.metrics.text));
    let server = report
        .metrics
        .counts
        .as_ref()
        .and_then(|c| c.policy_in_force.as_ref());
    if let Some(server) = server {
        let agrees = if server.digest.as_deref() == Some(policy.digest.as_str()) {
            format!("the same as {}", s(&policy.from))
        } else {
            format!(
                "{} {} (a reload is pending or was refused: see the policy reloads above)",
                paint("DIFFERS from", Color::Red),
                s(&policy.from)
            )
        };
        let label = |v: &Option<String>| s(v.as_deref().unwrap_or_default());
        println!(
            "Policy in force (server): {} from {}, mode {}: {agrees}",
            label(&server.digest),
            label(&server.source),
            label(&server.mode),
        );
    }
    if let Some(unread) = report
        .metrics
        .counts
        .as_ref()
        .map(|c| &c.sources_unread)
        .filter(|u| !u.is_empty())
    {
        println!(
            "Sources: {} (ready, judging by the strictest reading until they list): not listed: {}",
            paint("DEGRADED", Color::Red),
            s(&unread.join(", "))
        );
    }
    let posting = &report.who_may_post_reviews;
    let text = s(&posting.text);
    println!(
        "Who may post reviews: {}",
        if posting.open {
            paint(&text, Color::Red)
        } else {
            text
        }
    );
    print_events(report);
    crate::plugin::trusted_reach::print(&report.trusted_identity_reach);
    println!(
        "status: {}",
        if report.healthy {
            paint("ok", Color::Green)
        } else {
            paint("NOT OK", Color::Red)
        }
    );
}

/// Each webhook configuration, and where each of its webhooks calls.
fn print_configurations(configurations: &[Configuration]) {
    let s = |text: &str| printable(text).into_owned();
    for c in configurations {
        let Some(hooks) = &c.webhooks else {
            println!(
                "{} {}: {}",
                c.kind,
                s(&c.name),
                paint("MISSING", Color::Red)
            );
            continue;
        };
        println!("{} {}: present", c.kind, s(&c.name));
        for h in hooks {
            let ready = match (h.ready_endpoints, &h.tls_from_here) {
                (Some(n), _) => format!(", {n} ready endpoint(s)"),
                (None, Some(tls)) => format!(", {}", s(&tls.text)),
                (None, None) => String::new(),
            };
            println!(
                "  {}: failurePolicy {}, caBundle {}, calls {}{ready}",
                s(&h.name),
                s(h.failure_policy.as_deref().unwrap_or_default()),
                if h.ca_bundle { "present" } else { "MISSING" },
                s(&h.calls),
            );
            if let Some(serving) = &h.serving_certificate {
                println!("    {}", s(&serving.text));
            }
        }
    }
}

fn print_events(report: &Report) {
    let s = |text: &str| printable(text).into_owned();
    let o = |text: &Option<String>| s(text.as_deref().unwrap_or_default());
    match &report.recent_drift_blocked {
        Listing::NotReadable(why) => {
            println!("Recent DriftBlocked Events: not readable: {}", s(why))
        }
        Listing::Found(list) if list.is_empty() => println!("Recent DriftBlocked Events: none"),
        Listing::Found(list) => {
            println!("Recent DriftBlocked Events:");
            for e in list {
                println!("  {} {}: {}", o(&e.time), s(&e.object), o(&e.note));
            }
        }
    }
    match &report.active_break_glass {
        Listing::NotReadable(why) => println!("Active break-glass: not readable: {}", s(why)),
        Listing::Found(list) if list.is_empty() => println!("Active break-glass: none"),
        Listing::Found(list) => {
            println!("Active break-glass:");
            for e in list {
                let paused = match &e.paused {
                    Some(p) => format!(" (paused: {})", s(p)),
                    None => " (nothing paused: the GitOps tool may revert it)".to_owned(),
                };
                println!(
                    "  {} until {}: {}{paused}",
                    s(&e.object),
                    o(&e.expires),
                    o(&e.reason)
                );
            }
        }
    }
    if !report.expired_break_glass.is_empty() {
        println!("Break-glass that grants nothing, left on objects (the sweeper removes it):");
        for e in &report.expired_break_glass {
            let why = if e.state == "ended" {
                "ended, driftguard's pause marker left".to_owned()
            } else {
                o(&e.why)
            };
            println!("  {} {why}: {}", s(&e.object), o(&e.reason));
        }
    }
    let scan = &report.break_glass_scan;
    let names = scan.not_readable.as_deref().unwrap_or_default();
    if !names.is_empty() {
        let shown: Vec<String> = names.iter().take(5).map(|n| s(n)).collect();
        let more = if names.len() > 5 { ", ..." } else { "" };
        println!(
            "  ({} types not readable, not searched: {}{more})",
            names.len(),
            shown.join(", ")
        );
    }
    for f in scan.failed.as_deref().unwrap_or_default() {
        println!("  (not listed: {})", s(f));
    }
}
