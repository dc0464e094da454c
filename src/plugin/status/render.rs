//! What `status` prints as text.

use super::Listing;
use super::expiry::Expiry;
use super::report::{Configuration, HookReport, Report};
use crate::plugin::out::{Color, Out, outln};

pub(super) fn print_text(out: &mut Out, report: &Report) {
    print_configurations(out, &report.configurations);
    let policy = &report.policy;
    outln!(
        out,
        "Policy: {} (mode {}, break-glass {})",
        policy.from,
        policy.mode,
        if policy.break_glass_enabled {
            "enabled"
        } else {
            "disabled"
        }
    );
    outln!(out, "Metrics: {}", report.metrics.text);
    let server = report
        .metrics
        .counts
        .as_ref()
        .and_then(|c| c.policy_in_force.as_ref());
    if let Some(server) = server {
        let label = |v: &Option<String>| v.clone().unwrap_or_default();
        out.text(format_args!(
            "Policy in force (server): {} from {}, mode {}: ",
            label(&server.digest),
            label(&server.source),
            label(&server.mode),
        ));
        if server.digest.as_deref() == Some(policy.digest.as_str()) {
            outln!(out, "the same as {}", policy.from);
        } else {
            out.paint("DIFFERS from", Color::Red).line(format_args!(
                " {} (a reload is pending or was refused: see the policy reloads above)",
                policy.from
            ));
        }
    }
    print_registration(out, &report.registration);
    if let Some(unread) = report
        .metrics
        .counts
        .as_ref()
        .map(|c| &c.sources_unread)
        .filter(|u| !u.is_empty())
    {
        out.text("Sources: ")
            .paint("DEGRADED", Color::Red)
            .line(format_args!(
                " (ready, judging by the strictest reading until they list): not listed: {}",
                unread.join(", ")
            ));
    }
    let posting = &report.who_may_post_reviews;
    out.text("Who may post reviews: ");
    if posting.open {
        out.paint(&posting.text, Color::Red).line("");
    } else {
        out.line(&posting.text);
    }
    print_events(out, report);
    crate::plugin::trusted_reach::print(out, &report.trusted_identity_reach);
    out.text("status: ");
    if report.healthy {
        out.paint("ok", Color::Green).line("");
    } else {
        out.paint("NOT OK", Color::Red).line("");
    }
}

/// Each webhook configuration, and where each of its webhooks calls.
fn print_configurations(out: &mut Out, configurations: &[Configuration]) {
    for c in configurations {
        let Some(hooks) = &c.webhooks else {
            out.text(format_args!("{} {}: ", c.kind, c.name))
                .paint("MISSING", Color::Red)
                .line("");
            continue;
        };
        outln!(out, "{} {}: present", c.kind, c.name);
        for h in hooks {
            let ready = match (h.ready_endpoints, &h.tls_from_here) {
                (Some(n), _) => format!(", {n} ready endpoint(s)"),
                (None, Some(tls)) => format!(", {}", tls.text),
                (None, None) => String::new(),
            };
            outln!(
                out,
                "  {}: failurePolicy {}, caBundle {}, calls {}{ready}",
                h.name,
                h.failure_policy.as_deref().unwrap_or_default(),
                if h.ca_bundle { "present" } else { "MISSING" },
                h.calls,
            );
            if let Some(serving) = &h.serving_certificate {
                outln!(out, "    {}", serving.text);
            }
            if let Some(serving) = serving_expiry(h) {
                serving.print(out, "serving certificate");
            }
            for ca in &h.ca_bundle_expiry {
                ca.print(out, "caBundle CA");
            }
        }
    }
}

/// The serving certificate's dates: the Secret's for a Service, what the
/// handshake presented for a URL.
fn serving_expiry(h: &HookReport) -> Option<&Expiry> {
    let secret = h
        .serving_certificate
        .as_ref()
        .and_then(|s| s.expiry.as_ref());
    secret.or_else(|| h.tls_from_here.as_ref()?.expiry.as_ref())
}

fn print_events(out: &mut Out, report: &Report) {
    let o = |text: &Option<String>| text.clone().unwrap_or_default();
    match &report.recent_drift_blocked {
        Listing::NotReadable(why) => outln!(out, "Recent DriftBlocked Events: not readable: {why}"),
        Listing::Found(list) if list.is_empty() => outln!(out, "Recent DriftBlocked Events: none"),
        Listing::Found(list) => {
            outln!(out, "Recent DriftBlocked Events:");
            for e in list {
                outln!(out, "  {} {}: {}", o(&e.time), e.object, o(&e.note));
            }
        }
    }
    match &report.active_break_glass {
        Listing::NotReadable(why) => outln!(out, "Active break-glass: not readable: {why}"),
        Listing::Found(list) if list.is_empty() => outln!(out, "Active break-glass: none"),
        Listing::Found(list) => {
            outln!(out, "Active break-glass:");
            for e in list {
                let paused = match &e.paused {
                    Some(p) => format!(" (paused: {p})"),
                    None => " (nothing paused: the GitOps tool may revert it)".to_owned(),
                };
                outln!(
                    out,
                    "  {} until {}: {}{paused}",
                    e.object,
                    o(&e.expires),
                    o(&e.reason)
                );
            }
        }
    }
    if !report.expired_break_glass.is_empty() {
        outln!(
            out,
            "Break-glass that grants nothing, left on objects (the sweeper removes it):"
        );
        for e in &report.expired_break_glass {
            let why = if e.state == "ended" {
                "ended, driftguard's pause marker left".to_owned()
            } else {
                o(&e.why)
            };
            outln!(out, "  {} {why}: {}", e.object, o(&e.reason));
        }
    }
    let scan = &report.break_glass_scan;
    let names = scan.not_readable.as_deref().unwrap_or_default();
    if !names.is_empty() {
        let more = if names.len() > 5 { ", ..." } else { "" };
        outln!(
            out,
            "  ({} types not readable, not searched: {}{more})",
            names.len(),
            names[..names.len().min(5)].join(", ")
        );
    }
    for f in scan.failed.as_deref().unwrap_or_default() {
        outln!(out, "  (not listed: {f})");
    }
}

/// The webhooks against the policy `status` read.
fn print_registration(out: &mut Out, registration: &Listing<super::report::RegistrationReport>) {
    out.text("Registration against the policy: ");
    let report = match registration {
        Listing::NotReadable(why) => {
            outln!(out, "not checked ({why})");
            return;
        }
        Listing::Found(found) => match found.first() {
            Some(r) => r,
            None => return,
        },
    };
    if report.differences.is_empty() {
        outln!(out, "the webhooks send exactly what it judges");
        return;
    }
    if report.unsound {
        out.paint("DIFFERS", Color::Red)
            .line(format_args!(": it skips writes the policy judges"));
    } else {
        outln!(out, "differs: it sends writes the policy never judges");
    }
    for line in &report.differences {
        outln!(out, "  {line}");
    }
    if let Some(fix) = report.fix {
        outln!(out, "  fix: {fix}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Authority;
    use crate::certs::expiry::{Validity, now};
    use crate::plugin::status::expiry::{leaf_of_pem, of_pem};
    use crate::plugin::status::tls::ServingCheck;

    /// Each webhook's lines say how long the serving certificate and the
    /// caBundle's CA have left, the days red when they call for a renewal.
    #[test]
    fn status_says_when_the_serving_certificate_and_the_ca_expire() {
        let day = 86_400;
        let now = now();
        let ca = Authority::new_valid(
            "driftguard CA",
            Validity {
                not_before: now - 400 * day,
                not_after: now - 2 * day - 60,
            },
        )
        .unwrap();
        let soon = Validity {
            not_before: now - day,
            not_after: now + 9 * day + 60,
        };
        let (leaf, _) = ca.leaf_valid("driftguard", &[], &[], soon).unwrap();
        let hook = HookReport {
            name: "validate.driftguard.io".into(),
            failure_policy: Some("Fail".into()),
            ca_bundle: true,
            ca_bundle_expiry: of_pem(ca.cert_pem.as_bytes(), now),
            calls: "service driftguard/driftguard".into(),
            ready_endpoints: Some(1),
            tls_from_here: None,
            serving_certificate: Some(ServingCheck {
                secret: "driftguard/driftguard-tls".into(),
                verifies: Some(true),
                text: "caBundle verifies tls.crt".into(),
                expiry: leaf_of_pem(leaf.as_bytes(), now),
            }),
        };
        let configurations = [Configuration {
            kind: "ValidatingWebhookConfiguration",
            name: "driftguard".into(),
            present: true,
            webhooks: Some(vec![hook]),
        }];
        let mut out = Out::buffer();
        print_configurations(&mut out, &configurations);
        let lines: Vec<&str> = out.written().lines().collect();
        let red = |text: &str| format!("\x1b[31m{text}");
        assert!(
            lines[3].starts_with(&format!(
                "    serving certificate CN=driftguard: {}",
                red("expires in 9 days (")
            )),
            "{lines:#?}"
        );
        assert!(
            lines[4].starts_with(&format!(
                "    caBundle CA CN=driftguard CA: {}",
                red("expired 2 days ago (")
            )),
            "{lines:#?}"
        );
        assert_eq!(lines.len(), 5, "{lines:#?}");
    }
}
