//! The plain-HTTP probe port: `/healthz` (alive), `/readyz` (policy loaded,
//! TLS listener bound, not shutting down) and `/metrics`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Debug)]
pub struct Health {
    pub policy_loaded: AtomicBool,
    pub tls_bound: AtomicBool,
    pub shutting_down: AtomicBool,
    /// False only while a watched GitOps source has never been listed.
    pub sources_filled: AtomicBool,
    /// Watched kinds the apiserver serves at another version only: each
    /// named, since "not listed yet" would hide that it never will be.
    pub sources_mismatched: Mutex<Vec<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            policy_loaded: AtomicBool::new(false),
            tls_bound: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            sources_filled: AtomicBool::new(true),
            sources_mismatched: Mutex::new(Vec::new()),
        }
    }
}

impl Health {
    /// Why the server is not ready, if it is not.
    pub fn not_ready(&self) -> Option<String> {
        let mismatched = self
            .sources_mismatched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("; ");
        if self.shutting_down.load(Ordering::SeqCst) {
            Some("shutting down".into())
        } else if !self.policy_loaded.load(Ordering::SeqCst) {
            Some("policy not loaded".into())
        } else if !self.tls_bound.load(Ordering::SeqCst) {
            Some("TLS listener not bound".into())
        } else if !mismatched.is_empty() {
            Some(format!("served at another API version: {mismatched}"))
        } else if !self.sources_filled.load(Ordering::SeqCst) {
            Some("Argo CD / Flux sources not listed yet".into())
        } else {
            None
        }
    }
}

pub fn router(health: Arc<Health>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(health): State<Arc<Health>>| async move {
                match health.not_ready() {
                    None => (StatusCode::OK, "ready\n".to_owned()),
                    Some(why) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {why}\n"),
                    ),
                }
            }),
        )
        .with_state(health)
        .route(
            "/metrics",
            get(|State(metrics): State<Arc<Metrics>>| async move {
                let alive = tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks();
                metrics.runtime_tasks.set(alive as i64);
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
                    .into_response()
            })
            .with_state(metrics),
        )
}
