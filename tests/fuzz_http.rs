//! Fuzzing the HTTP request decoding (issue 7, item 3): proptest drives the
//! real server (`sluice_server::server::start`, in this process, on a loopback
//! port over a temporary data directory) with generated requests: every
//! route and method, path ids (numeric, huge, negative, names, escapes, 300
//! bytes), query strings, JSON bodies (arbitrary values, and valid bodies of
//! each route with one field replaced or removed, including base64 payloads,
//! partitioning values, ids and user headers), non-JSON bodies, content types
//! and authorization headers.
//!
//! Property: the server never answers 5xx and never panics (a handler panic
//! is a 500, and a panic inside the engine poisons it so that every later
//! request is a 500); every 4xx is Iggy's JSON error body.
//!
//! Cases: `SLUICE_FUZZ_CASES` (default 256); a failing case prints the request.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{Value, json};
use sluice_testkit::http::{Api, ROOT_USER, start_server_with};
use sluice_testkit::props;

const ROUTES: &[(&str, &[&str])] = &[
    ("/ping", &["GET"]),
    ("/users/login", &["POST"]),
    ("/users/refresh-token", &["POST"]),
    ("/users/logout", &["DELETE"]),
    ("/streams", &["GET", "POST"]),
    ("/streams/{s}", &["GET", "PUT", "DELETE"]),
    ("/streams/{s}/purge", &["DELETE"]),
    ("/streams/{s}/topics", &["GET", "POST"]),
    ("/streams/{s}/topics/{t}", &["GET", "PUT", "DELETE"]),
    ("/streams/{s}/topics/{t}/purge", &["DELETE"]),
    ("/streams/{s}/topics/{t}/partitions", &["POST", "DELETE"]),
    ("/streams/{s}/topics/{t}/messages", &["GET", "POST"]),
    ("/streams/{s}/topics/{t}/consumer-offsets", &["GET", "PUT"]),
    ("/streams/{s}/topics/{t}/consumer-offsets/{c}", &["DELETE"]),
    ("/streams/{s}/topics/{t}/consumer-groups", &["GET", "POST"]),
    (
        "/streams/{s}/topics/{t}/consumer-groups/{c}",
        &["GET", "DELETE"],
    ),
    ("/status/purge", &["GET"]),
    ("/metrics", &["GET"]),
    ("/{s}", &["GET", "POST", "PATCH"]),
];

const IDS: &[&str] = &[
    "orders",
    "events",
    "readers",
    "1",
    "2",
    "0",
    "4294967295",
    "4294967296",
    "99999999999999999999999",
    "-1",
    "1.5",
    "0x10",
    " 1",
    "%FF%FE",
    "%00",
    "%2F",
    "..",
    "a%20b",
];

const QUERY_KEYS: &[&str] = &[
    "consumer_id",
    "partition_id",
    "kind",
    "value",
    "count",
    "auto_commit",
    "consumer_kind",
    "stream_id",
    "topic_id",
    "state",
    "partitions_count",
];

const QUERY_VALUES: &[&str] = &[
    "1",
    "0",
    "-1",
    "4294967296",
    "18446744073709551616",
    "next",
    "offset",
    "timestamp",
    "first",
    "last",
    "consumer_group",
    "consumer",
    "true",
    "maybe",
    "",
    "10000",
    "10001",
    "applied",
    "none",
    "orders",
    "%FF",
];

/// Field names of every route's body, so arbitrary objects hit real fields.
const FIELDS: &[&str] = &[
    "name",
    "stream_id",
    "topic_id",
    "partitions_count",
    "compression_algorithm",
    "message_expiry",
    "max_topic_size",
    "replication_factor",
    "options",
    "durability",
    "partitioning",
    "kind",
    "value",
    "messages",
    "id",
    "payload",
    "user_headers",
    "key",
    "consumer_id",
    "consumer_kind",
    "partition_id",
    "offset",
    "group_id",
    "username",
    "password",
    "token",
];

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A valid body for some route, to be mutated.
fn templates() -> Vec<Value> {
    vec![
        json!({"name": "fuzzed"}),
        json!({"stream_id": 40, "name": "fuzzed2"}),
        json!({"name": "t", "partitions_count": 2, "compression_algorithm": "none",
               "message_expiry": 0, "max_topic_size": 0, "replication_factor": 1,
               "options": {"durability": "persisted", "consumer_offset_durability": "buffered",
                           "segment_size": 4096}}),
        json!({"partitioning": {"kind": "partition_id", "value": b64(&0u32.to_le_bytes())},
               "messages": [{"id": 0, "payload": b64(b"hello"),
                             "user_headers": [{"key": {"kind": "string", "value": b64(b"k")},
                                               "value": {"kind": "uint32", "value": b64(&7u32.to_le_bytes())}}]}]}),
        json!({"partitioning": {"kind": "messages_key", "value": b64(b"key")},
               "messages": [{"id": "0f0e0d0c-0b0a-0908-0706-050403020100", "payload": b64(b"x")}]}),
        json!({"consumer_id": 1, "partition_id": 0, "offset": 0}),
        json!({"consumer_id": "readers", "consumer_kind": "consumer_group", "partition_id": 0, "offset": 0}),
        json!({"partitions_count": 1}),
        json!({"group_id": 9, "name": "g"}),
        json!({"username": ROOT_USER, "password": "wrong"}),
        json!({"token": "not-a-token"}),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[ -~]{0,16}".prop_map(Value::String),
        prop::sample::select(vec![
            "",
            "none",
            "balanced",
            "partition_id",
            "AAAA",
            "=",
            "%%%"
        ])
        .prop_map(|s| Value::String(s.to_string())),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(|b| Value::String(b64(&b))),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    prop::sample::select(FIELDS).prop_map(str::to_string),
                    "[a-z_]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every place in `v` a mutation can hit (object fields and array items).
fn slots(v: &Value, at: &mut Vec<Vec<String>>, path: Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(k.clone());
                at.push(p.clone());
                slots(child, at, p);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let mut p = path.clone();
                p.push(i.to_string());
                at.push(p.clone());
                slots(child, at, p);
            }
        }
        _ => {}
    }
}

/// Replaces (or with `None` removes) the value at `path`.
fn set(v: &mut Value, path: &[String], with: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(p).unwrap(),
            Value::Array(a) => &mut a[p.parse::<usize>().unwrap()],
            _ => return,
        };
    }
    match (cur, with) {
        (Value::Object(m), Some(w)) => {
            m.insert(last.clone(), w);
        }
        (Value::Object(m), None) => {
            m.remove(last);
        }
        (Value::Array(a), Some(w)) => a[last.parse::<usize>().unwrap()] = w,
        (Value::Array(a), None) => {
            a.remove(last.parse::<usize>().unwrap());
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

#[derive(Debug, Clone)]
enum AuthHeader {
    Valid,
    Missing,
    Other(String),
}

#[derive(Debug, Clone)]
struct FuzzRequest {
    method: &'static str,
    path: String,
    query: Vec<(String, String)>,
    body: Body,
    content_type: Option<&'static str>,
    auth: AuthHeader,
}

fn encode(s: &str) -> String {
    // Keep `%XX` escapes from the samples; escape everything else unusual.
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'%' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(IDS).prop_map(str::to_string),
        1 => "[ -~]{1,12}".prop_map(|s| encode(&s)),
        1 => Just("x".repeat(300)),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    let mutated = (
        prop::sample::select(templates()),
        any::<usize>(),
        prop::option::of(json_value()),
    )
        .prop_map(|(mut t, pick, with)| {
            let mut at = Vec::new();
            slots(&t, &mut at, Vec::new());
            if !at.is_empty() {
                set(&mut t, &at[pick % at.len()], with);
            }
            Body::Json(t)
        });
    prop_oneof![
        1 => Just(Body::None),
        2 => prop::sample::select(templates()).prop_map(Body::Json),
        6 => mutated,
        2 => json_value().prop_map(Body::Json),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Body::Raw),
    ]
}

fn request() -> impl Strategy<Value = FuzzRequest> {
    let route = prop::sample::select(ROUTES).prop_flat_map(|(template, methods)| {
        (
            Just(template),
            prop::sample::select(methods),
            id(),
            id(),
            id(),
        )
    });
    (
        route,
        prop::collection::vec(
            (
                prop_oneof![
                    4 => prop::sample::select(QUERY_KEYS).prop_map(str::to_string),
                    1 => "[ -~]{0,6}",
                ],
                prop_oneof![
                    4 => prop::sample::select(QUERY_VALUES).prop_map(str::to_string),
                    1 => "[ -~]{0,8}".prop_map(|s| encode(&s)),
                ],
            ),
            0..5,
        ),
        body(),
        prop::option::of(prop::sample::select(vec![
            "application/json",
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "application/x-www-form-urlencoded",
        ])),
        prop_oneof![
            8 => Just(AuthHeader::Valid),
            1 => Just(AuthHeader::Missing),
            1 => prop::sample::select(vec!["Bearer ", "Bearer x", "Basic aWdneTppZ2d5", "bearer", "Bearer \u{7f}"])
                .prop_map(|s| AuthHeader::Other(s.to_string())),
        ],
    )
        .prop_map(
            |((template, method, s, t, c), query, body, content_type, auth)| FuzzRequest {
                method,
                path: template
                    .replace("{s}", &s)
                    .replace("{t}", &t)
                    .replace("{c}", &c),
                query,
                body,
                content_type,
                auth,
            },
        )
}

async fn send(api: &Api, req: &FuzzRequest) -> Result<(u16, String), String> {
    let mut url = format!("{}{}", api.base, req.path);
    if !req.query.is_empty() {
        let q: Vec<String> = req
            .query
            .iter()
            .map(|(k, v)| format!("{}={v}", encode(k)))
            .collect();
        url.push('?');
        url.push_str(&q.join("&"));
    }
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap();
    let mut builder = api.client.request(method, &url);
    match &req.auth {
        AuthHeader::Valid => builder = builder.bearer_auth(api.token.as_ref().unwrap()),
        AuthHeader::Missing => {}
        AuthHeader::Other(v) => {
            if let Ok(h) = reqwest::header::HeaderValue::from_str(v) {
                builder = builder.header(reqwest::header::AUTHORIZATION, h);
            }
        }
    }
    if let Some(ct) = req.content_type {
        builder = builder.header(reqwest::header::CONTENT_TYPE, ct);
    }
    builder = match &req.body {
        Body::None => builder,
        Body::Json(v) => builder.body(serde_json::to_vec(v).unwrap()),
        Body::Raw(b) => builder.body(b.clone()),
    };
    let response = builder.send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let text = response.text().await.map_err(|e| e.to_string())?;
    Ok((status, text))
}

fn check(status: u16, text: &str) -> Result<(), String> {
    if status >= 500 {
        return Err(format!("server error {status}: {text}"));
    }
    if status >= 400 {
        let body: Value = serde_json::from_str(text)
            .map_err(|e| format!("{status} is not JSON ({e}): {text}"))?;
        let shaped = body["id"].is_u64()
            && body["code"].is_string()
            && body["reason"].is_string()
            && body.get("field").is_some();
        if !shaped {
            return Err(format!("{status} is not Iggy's error body: {text}"));
        }
    }
    Ok(())
}

#[test]
fn no_request_makes_the_server_answer_5xx_or_an_unshaped_error() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = rt.block_on(start_server_with(dir.path(), |c| {
        // Failed logins are part of the input: keep their delay short.
        c.auth.failed_login_delay = Duration::from_millis(1);
    }));
    let api = rt.block_on(async {
        let api = Api::login(&server).await;
        api.create_stream_and_topic("orders", "events", 2).await;
        assert_eq!(
            api.send_to("orders", "events", &["a", "b"]).await.status,
            201
        );
        let r = api
            .post(
                "/streams/orders/topics/events/consumer-groups",
                json!({"name": "readers"}),
            )
            .await;
        assert!(r.status < 300, "{}", r.text);
        api
    });
    let mut runner = TestRunner::new(props::config(props::fuzz_cases(256)));
    let started = std::time::Instant::now();
    let (ok, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let result = runner.run(&request(), |req| {
        let (status, text) = rt
            .block_on(send(&api, &req))
            .map_err(|e| TestCaseError::fail(format!("request failed: {e}")))?;
        if status < 300 {
            ok.set(ok.get() + 1);
        } else {
            refused.set(refused.get() + 1);
        }
        check(status, &text).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    println!(
        "{} requests in {:?}: {} succeeded, {} refused (4xx)",
        ok.get() + refused.get(),
        started.elapsed(),
        ok.get(),
        refused.get()
    );
    // Some requests get through to the engine, most are refused: the
    // generator reaches both sides of the decoding.
    assert!(ok.get() > 0 && refused.get() > 0);
    rt.block_on(server.shutdown()).unwrap();
}
