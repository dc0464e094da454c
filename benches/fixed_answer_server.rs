//! The load benchmark's baseline: driftguard's own TLS and HTTP stack
//! (`server::serve_tls`, rustls, hyper, axum) answering every POST with one
//! fixed, allowed AdmissionReview after reading the body. The difference to
//! `driftguard serve` is the decision and nothing else.
//!
//! Usage: fixed-answer-server LISTEN CERT KEY [--parse]
//!
//! With `--parse` it also parses the body into a `serde_json::Value` before
//! answering: the least any webhook that reads the review must do.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use driftguard::server::probes::Health;
use driftguard::server::{self, ConnectionLimits, tls};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"status":{},"uid":"5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11"}}"#;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (listen, cert, key, parse) = match args.as_slice() {
        [_, l, c, k] => (l, c, k, false),
        [_, l, c, k, flag] if flag == "--parse" => (l, c, k, true),
        _ => {
            eprintln!("usage: fixed-answer-server LISTEN CERT KEY [--parse]");
            std::process::exit(2);
        }
    };
    let pair =
        tls::certified_key(&std::fs::read(cert).unwrap(), &std::fs::read(key).unwrap()).unwrap();
    let store = Arc::new(tls::CertStore::new(pair));
    let acceptor =
        tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(store, None, &[]).unwrap()));
    let limits = ConnectionLimits {
        max_body_bytes: Some(8 << 20),
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(120),
        body_timeout: Duration::from_secs(10),
        handshake_timeout: Duration::from_secs(10),
        shutdown_delay: Duration::ZERO,
        shutdown_timeout: Duration::from_secs(5),
        max_connections: 4096,
    };
    let router = axum::Router::new().route(
        "/{*path}",
        post(move |body: Bytes| async move {
            if parse {
                std::hint::black_box(serde_json::from_slice::<serde_json::Value>(&body).ok());
            }
            std::hint::black_box(body);
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                ANSWER,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind(listen.as_str())
        .await
        .unwrap();
    server::serve_tls(
        listener,
        acceptor,
        router,
        &limits,
        &Health::default(),
        &driftguard::metrics::Metrics::default(),
        driftguard::server::budget::MemoryBudget::new(
            128 << 20,
            prometheus_client::metrics::gauge::Gauge::default(),
        ),
    )
    .await;
}
