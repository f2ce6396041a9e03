//! Scenario 5b, messages over HTTP: the real server (in this process, on a
//! loopback port, on the disk) driven through the Iggy HTTP API.
//!
//! Invariants:
//! - The client speaks the wire format the official Iggy SDK's `HttpClient`
//!   sends (JSON, base64 payloads, bearer token) through reqwest, which
//!   `sluice` already ships; the SDK itself is not linked into the binary
//!   (docs/adr/0009-bench-http-client.md says why).
//! - A batch's latency is from sending its request to reading the whole
//!   answer; encoding the batch's JSON is not timed.
//! - The reference is the in-process figure of the same batch shape
//!   (`messages.rs`), so the ratio is what HTTP costs on top of the engine.

use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sluice_server::config::ServerConfig;
use sluice_server::http::auth::RootSource;
use sluice_server::server::{self, ServeOptions};

use super::messages::InProcess;
use super::{BenchError, Ctx, Figure, Result, quantile};

fn http(e: impl std::fmt::Display) -> BenchError {
    BenchError::Http(e.to_string())
}

async fn call(req: reqwest::RequestBuilder) -> Result<Value> {
    let r = req.send().await.map_err(http)?;
    let status = r.status();
    let text = r.text().await.map_err(http)?;
    if !status.is_success() {
        return Err(BenchError::Http(format!("{status}: {text}")));
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub fn run(ctx: &mut Ctx, inproc: &InProcess) -> Result<Vec<Figure>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(http)?;
    let data = ctx.dir("http")?.join("data");
    let sizes = ctx.sizes;
    let disk = ctx.disk.clone();
    let reconciler = ctx.reconciler.clone();
    runtime.block_on(async move {
        let mut config = ServerConfig {
            data_dir: data,
            ..ServerConfig::default()
        };
        config.http.address = ([127, 0, 0, 1], 0).into();
        config.tcp.address = ([127, 0, 0, 1], 0).into();
        // The bench's reconciler settings (the server's, or --cleanup-concurrency).
        config.reconciler = reconciler;
        let server = server::start(
            disk,
            ServeOptions {
                config,
                root: RootSource::DefaultIggy,
                seed: 6,
            },
        )
        .await
        .map_err(http)?;
        let base = format!("http://{}", server.local_addr);
        let client = reqwest::Client::new();
        let token = crate::login::login_default_root(&client, &base)
            .await
            .map_err(http)?;
        call(
            client
                .post(format!("{base}/streams"))
                .bearer_auth(&token)
                .json(&json!({"name": "bench"})),
        )
        .await?;
        call(
            client
                .post(format!("{base}/streams/bench/topics"))
                .bearer_auth(&token)
                .json(&json!({"name": "http", "partitions_count": 1,
                              "options": {"durability": "buffered"}})),
        )
        .await?;
        let url = format!("{base}/streams/bench/topics/http/messages");
        let mut lat = Vec::new();
        let mut took = 0.0f64;
        for b in 0..sizes.http_batches {
            let messages: Vec<Value> = (0..sizes.batch)
                .map(|i| json!({"payload": STANDARD.encode(vec![(b + i) as u8; sizes.message_bytes])}))
                .collect();
            let body = serde_json::to_vec(&json!({
                "partitioning": {"kind": "balanced", "value": ""},
                "messages": messages,
            }))
            .map_err(http)?;
            let t0 = Instant::now();
            call(
                client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body),
            )
            .await?;
            let dt = t0.elapsed().as_secs_f64();
            took += dt;
            lat.push(dt * 1e3);
        }
        let sent = sizes.http_batches * sizes.batch;
        let t0 = Instant::now();
        let mut offset = 0u64;
        while offset < sent {
            let v = call(client.get(format!(
                "{url}?consumer_id=1&partition_id=0&kind=offset&value={offset}&count={}",
                sizes.batch
            )).bearer_auth(&token))
            .await?;
            let n = v["messages"].as_array().map_or(0, |a| a.len()) as u64;
            if n == 0 {
                return Err(BenchError::Http(format!("poll at {offset} returned nothing")));
            }
            offset += n;
        }
        let poll_took = t0.elapsed().as_secs_f64();
        server.shutdown().await.map_err(http)?;
        let p50 = quantile(&mut lat, 0.5);
        let p99 = quantile(&mut lat, 0.99);
        Ok(vec![
            Figure::new(
                "http.send_msgs_per_s",
                format!("HTTP send, {} batches of {}, buffered", sizes.http_batches, sizes.batch),
                sent as f64 / took,
                "msgs/s",
                inproc.append_msgs_per_s,
                "in-process append, buffered",
            ),
            Figure::new(
                "http.send_p50_ms",
                "HTTP send batch latency, p50",
                p50,
                "ms",
                inproc.append_p50_ms,
                "in-process append batch, p50",
            ),
            Figure::new(
                "http.send_p99_ms",
                "HTTP send batch latency, p99",
                p99,
                "ms",
                inproc.append_p99_ms,
                "in-process append batch, p99",
            ),
            Figure::new(
                "http.poll_msgs_per_s",
                format!("HTTP poll, {} per call", sizes.batch),
                sent as f64 / poll_took,
                "msgs/s",
                inproc.poll_msgs_per_s,
                "in-process poll",
            ),
        ])
    })
}
