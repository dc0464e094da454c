//! The parent of a `…/scale` write, read from the apiserver: a Scale carries no
//! labels or annotations, so ownership and rules come from the parent. Any
//! scalable resource is read through the same raw GET (no discovery needed).
//! Each read is bounded in time, and results are cached briefly so that a burst
//! of scale writes costs one read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct ParentReader {
    client: kube::Client,
    timeout: Duration,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Value)>>,
}

impl ParentReader {
    pub fn new(client: kube::Client, timeout: Duration, ttl: Duration) -> Self {
        Self {
            client,
            timeout,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The object `group/version/resource` `namespace/name`, or why not.
    pub async fn read(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, String> {
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if namespace.is_empty() {
            format!("{base}/{resource}/{name}")
        } else {
            format!("{base}/namespaces/{namespace}/{resource}/{name}")
        };
        if let Some(hit) = self.cached(&path) {
            return Ok(hit);
        }
        let request = http::Request::get(&path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let value: Value =
            match tokio::time::timeout(self.timeout, self.client.request(request)).await {
                Err(_) => {
                    return Err(format!(
                        "reading {path} took longer than {:?}",
                        self.timeout
                    ));
                }
                Ok(Err(e)) => return Err(format!("reading {path}: {e}")),
                Ok(Ok(v)) => v,
            };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(path, (Instant::now(), value.clone()));
        Ok(value)
    }

    fn cached(&self, path: &str) -> Option<Value> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(path)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }
}
