//! Auth hardening (issue 7, item 5):
//! - every route but the public ones (`/ping`, login, refresh) refuses a
//!   missing, expired, revoked or forged token with 401 and Iggy's error
//!   body, before its handler runs; the routes come from the router's own
//!   tables (`sluice_server::http::{public_routes, authenticated_routes}`),
//!   so a new route is covered without editing this file;
//! - failed logins are slowed: each consecutive failure waits twice as long
//!   as the one before, and a success resets it (read from the server's own
//!   log line, plus wall-clock lower bounds that cannot flake);
//! - passwords and tokens never reach the log, even at `RUST_LOG=trace`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_server::http::{authenticated_routes, public_routes};
use sluice_server::server::RunningServer;
use sluice_testkit::http::{Api, start_server_with};
use sluice_testkit::process::Launch;

/// The in-process server with tokens that live `token_expiry` and a 1 ms
/// failed-login delay.
async fn start_server(dir: &Path, token_expiry: Duration) -> RunningServer {
    start_server_with(dir, |config| {
        config.auth.failed_login_delay = Duration::from_millis(1);
        config.auth.token_expiry = token_expiry;
    })
    .await
}

/// A fresh token of the root user `iggy`/`iggy`.
async fn login(base: &str) -> String {
    login_as(base, "iggy", "iggy").await
}

/// A fresh token of `username`.
async fn login_as(base: &str, username: &str, password: &str) -> String {
    Api::at(base)
        .logged_in(username, password)
        .await
        .expect("login")
        .token
        .expect("a token")
}

/// A concrete path for a route template, naming the fixture's resources.
fn concrete(template: &str) -> String {
    template
        .replace("{stream_id}", "s")
        .replace("{topic_id}", "t")
        .replace("{consumer_id}", "1")
        .replace("{group_id}", "g")
}

fn request(
    client: &reqwest::Client,
    base: &str,
    method: &str,
    template: &str,
) -> reqwest::RequestBuilder {
    let url = format!(
        "{base}{}?partition_id=0&partitions_count=1&consumer_id=1",
        concrete(template)
    );
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let body = json!({
        "name": "intruder",
        "partitions_count": 1,
        "consumer_id": 1,
        "partition_id": 0,
        "offset": 0,
        "token": "x",
        "partitioning": {"kind": "balanced", "value": ""},
        "messages": [{"payload": "aW50cnVkZXI="}],
    });
    client.request(method, url).json(&body)
}

async fn assert_unauthenticated(r: reqwest::RequestBuilder, what: &str) {
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 401, "{what}: {text}");
    let body: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
    assert_eq!(body["id"], 40, "{what}: {body}");
    assert_eq!(body["code"], "unauthenticated", "{what}: {body}");
    assert!(body["reason"].is_string(), "{what}: {body}");
    assert!(body["field"].is_null(), "{what}: {body}");
}

/// Stream `s`, topic `t` with one message, group `g`.
async fn fixture(client: &reqwest::Client, base: &str, token: &str) {
    for (url, body) in [
        (format!("{base}/streams"), json!({"name": "s"})),
        (
            format!("{base}/streams/s/topics"),
            json!({"name": "t", "partitions_count": 1}),
        ),
        (
            format!("{base}/streams/s/topics/t/consumer-groups"),
            json!({"name": "g"}),
        ),
        (
            format!("{base}/streams/s/topics/t/messages"),
            json!({"partitioning": {"kind": "balanced", "value": ""},
                   "messages": [{"payload": "a2VlcA=="}]}),
        ),
    ] {
        let r = client
            .post(url.as_str())
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
    }
}

#[test]
fn given_the_route_tables_then_only_ping_the_logins_and_refresh_are_public() {
    let public: Vec<(&str, String)> = public_routes();
    assert_eq!(
        public,
        vec![
            ("GET", "/ping".to_string()),
            ("POST", "/users/login".to_string()),
            ("POST", "/users/refresh-token".to_string()),
            ("POST", "/personal-access-tokens/login".to_string()),
        ]
    );
    let private = authenticated_routes();
    assert!(private.len() >= 25, "{private:?}");
    for known in [
        ("DELETE", "/users/logout"),
        ("GET", "/streams"),
        ("DELETE", "/streams/{stream_id}/topics/{topic_id}/purge"),
        (
            "PUT",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
        ),
        ("GET", "/status/purge"),
        ("GET", "/metrics"),
    ] {
        assert!(
            private.iter().any(|(m, p)| *m == known.0 && p == known.1),
            "{known:?} missing from {private:?}"
        );
    }
    assert!(private.iter().all(|(m, _)| *m != "OTHER"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_missing_forged_revoked_or_misplaced_tokens_when_calling_any_authenticated_route_then_401_and_nothing_changes()
 {
    // Given a server with a stream, a topic, a message and a group.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), Duration::from_secs(3600)).await;
    let base = format!("http://{}", server.local_addr);
    let client = reqwest::Client::new();
    let token = login(&base).await;
    fixture(&client, &base, &token).await;
    // (A state dump never shows a live token.)
    assert!(!format!("{server:?}").contains(&token));
    let revoked = login(&base).await;
    let r = client
        .delete(format!("{base}/users/logout"))
        .bearer_auth(&revoked)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });

    // When every authenticated route is called without a valid token.
    for (method, template) in authenticated_routes() {
        let what = |how: &str| format!("{method} {template} with {how}");
        let req = || request(&client, &base, method, &template);
        assert_unauthenticated(req(), &what("no token")).await;
        assert_unauthenticated(
            req().bearer_auth("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            &what("a forged token"),
        )
        .await;
        assert_unauthenticated(req().bearer_auth(&tampered), &what("a tampered token")).await;
        assert_unauthenticated(req().bearer_auth(&revoked), &what("a logged-out token")).await;
        assert_unauthenticated(req().bearer_auth(""), &what("an empty token")).await;
        assert_unauthenticated(
            req().basic_auth("iggy", Some("iggy")),
            &what("basic credentials"),
        )
        .await;
        assert_unauthenticated(
            req().header("authorization", format!("Token {token}")),
            &what("another scheme"),
        )
        .await;
        assert_unauthenticated(
            client
                .request(
                    reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                    format!("{base}{}?token={token}", concrete(&template)),
                )
                .header("x-access-token", &token),
            &what("the token outside the Authorization header"),
        )
        .await;
    }
    // A refresh needs a live token too.
    for bad in [revoked.as_str(), tampered.as_str(), ""] {
        assert_unauthenticated(
            client
                .post(format!("{base}/users/refresh-token"))
                .json(&json!({"token": bad})),
            "refresh with a bad token",
        )
        .await;
    }

    // Then nothing changed: one stream, one topic, the message, the group.
    let streams: Value = client
        .get(format!("{base}/streams"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = streams
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s"]);
    let polled: Value = client
        .get(format!(
            "{base}/streams/s/topics/t/messages?consumer_id=1&partition_id=0&kind=offset&value=0&count=10"
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(polled["messages"].as_array().unwrap().len(), 1, "{polled}");
    let r = client
        .get(format!(
            "{base}/streams/s/topics/t/consumer-offsets?consumer_id=1"
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "no offset was stored");
    let groups: Value = client
        .get(format!("{base}/streams/s/topics/t/consumer-groups"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");

    // And with a valid token every one of those routes exists (no 401,
    // no unknown route, no wrong method): the walk reached real handlers.
    for (method, template) in authenticated_routes() {
        let fresh = login(&base).await;
        let r = request(&client, &base, method, &template)
            .bearer_auth(&fresh)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert!(
            status != 401 && status != 405 && !text.contains("\"code\":\"not_found\""),
            "{method} {template} with a valid token: {status} {text}"
        );
    }
    // The public routes answer without a token.
    let ping = client.get(format!("{base}/ping")).send().await.unwrap();
    assert_eq!(ping.status(), 200);

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tokens_that_expire_at_once_when_calling_any_authenticated_route_then_401() {
    // Given a server whose tokens live zero seconds: every token it issues
    // is expired by the time it is presented (no sleeping, no flakiness).
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), Duration::ZERO).await;
    let base = format!("http://{}", server.local_addr);
    let client = reqwest::Client::new();
    let expired = login(&base).await;

    // When each authenticated route and the refresh are called with it,
    // then each answers 401 with Iggy's body.
    for (method, template) in authenticated_routes() {
        assert_unauthenticated(
            request(&client, &base, method, &template).bearer_auth(&expired),
            &format!("{method} {template} with an expired token"),
        )
        .await;
    }
    assert_unauthenticated(
        client
            .post(format!("{base}/users/refresh-token"))
            .json(&json!({"token": expired})),
        "refresh with an expired token",
    )
    .await;

    server.shutdown().await.unwrap();
}

// ---- the real binary: the log and the login delay ------------------------

const ROOT_USER: &str = "hardening-admin";
const ROOT_PASSWORD: &str = "Corr3ct-H0rse-Battery-9137";
const WRONG_PASSWORD: &str = "Wr0ng-Guess-Passw0rd-5521";
const DELAY_MS: u64 = 200;

fn spawn_binary(dir: &Path, log: &Path) -> sluice_testkit::process::Server {
    Launch::server(env!("CARGO_BIN_EXE_sluice"), dir)
        .env("SLUICE_ROOT_USERNAME", ROOT_USER)
        .env("SLUICE_ROOT_PASSWORD", ROOT_PASSWORD)
        .env("SLUICE_AUTH_FAILED_LOGIN_DELAY_MS", DELAY_MS.to_string())
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .stderr_to(log)
        .start()
}

/// A failed login: its status and how long it took.
async fn failed_login(client: &reqwest::Client, base: &str, user: &str, pass: &str) -> Duration {
    let started = Instant::now();
    let r = client
        .post(format!("{base}/users/login"))
        .json(&json!({"username": user, "password": pass}))
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("invalid_credentials"), "{text}");
    assert!(
        !text.contains(pass),
        "the answer echoes the password: {text}"
    );
    took
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_trace_logging_when_logging_in_failing_and_using_tokens_then_no_secret_is_logged_and_failures_are_slowed()
 {
    // Given the real server with explicit root credentials, a 200 ms base
    // delay for failed logins, and every log level on.
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let data = dir.path().join("data");
    let server = spawn_binary(&data, &log_path);
    let base = server.base().to_string();
    let client = reqwest::Client::new();

    // When logins fail three times in a row (the last with the right
    // password for the wrong user), then each takes at least the doubled delay.
    let d1 = failed_login(&client, &base, ROOT_USER, WRONG_PASSWORD).await;
    let d2 = failed_login(&client, &base, ROOT_USER, WRONG_PASSWORD).await;
    let d3 = failed_login(&client, &base, "someone-else", ROOT_PASSWORD).await;
    assert!(d1 >= Duration::from_millis(DELAY_MS), "{d1:?}");
    assert!(d2 >= Duration::from_millis(2 * DELAY_MS), "{d2:?}");
    assert!(d3 >= Duration::from_millis(4 * DELAY_MS), "{d3:?}");

    // And a success resets the count; tokens are used, refreshed, revoked.
    let token = login_as(&base, ROOT_USER, ROOT_PASSWORD).await;
    let d4 = failed_login(&client, &base, ROOT_USER, WRONG_PASSWORD).await;
    assert!(d4 >= Duration::from_millis(DELAY_MS), "{d4:?}");
    for (method, path) in [
        ("GET", "/streams"),
        ("GET", "/status/purge"),
        ("GET", "/metrics"),
        ("GET", "/streams/nope"),
    ] {
        let r = client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{base}{path}"),
            )
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_ne!(r.status(), 401, "{method} {path}");
    }
    let r = client
        .post(format!("{base}/users/refresh-token"))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let refreshed = v["access_token"]["token"].as_str().unwrap().to_string();
    let r = client
        .delete(format!("{base}/users/logout"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = client
        .get(format!("{base}/streams"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .get(format!("{base}/streams"))
        .bearer_auth(&refreshed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A malformed login body that carries the password.
    let r = client
        .post(format!("{base}/users/login"))
        .header("content-type", "application/json")
        .body(format!(
            "{{\"username\": \"{ROOT_USER}\", \"password\": \"{ROOT_PASSWORD}\""
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(!r.text().await.unwrap().contains(ROOT_PASSWORD));

    // Stop it (SIGTERM) so the log is complete.
    server.terminate(Duration::from_secs(10));

    // Then the log has the failures, with doubling delays reset by the success,
    let log = strip_ansi(&std::fs::read_to_string(&log_path).unwrap());
    let delays: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("login failed"))
        .map(|l| {
            let at = l.find("delay_ms=").expect("delay_ms field") + "delay_ms=".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        delays,
        [DELAY_MS, 2 * DELAY_MS, 4 * DELAY_MS, DELAY_MS],
        "login failures in the log"
    );
    assert!(log.contains("login succeeded"));
    // (Request-level tracing was on: the URIs are there.)
    assert!(log.contains("/users/refresh-token"), "trace output missing");
    // and no password and no token anywhere in it.
    for (what, secret) in [
        ("the root password", ROOT_PASSWORD),
        ("a wrong password", WRONG_PASSWORD),
        ("the access token", token.as_str()),
        ("the refreshed token", refreshed.as_str()),
    ] {
        assert!(!log.contains(secret), "{what} is in the server log");
    }
}
