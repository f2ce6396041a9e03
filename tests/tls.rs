//! TLS on both listeners (docs/adr/0023-tls.md): a self-signed certificate
//! for `localhost` made by the test, the official SDK's TLS clients (TCP, and
//! HTTP over HTTPS), reqwest over HTTPS, a plaintext client against a TLS
//! port, and the start-up errors of a bad configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_storage::DiskStorage;
use sluice_testkit::http::{start_server_with, try_start_server_on};

/// A bound for every client step: a failure must be an error, never a hang.
const STEP: Duration = Duration::from_secs(30);

/// The child test's variable: the HTTPS URL of the parent's server.
const CHILD_URL_ENV: &str = "SLUICE_TEST_TLS_CHILD_URL";

/// A self-signed certificate for `localhost` and its key, as PEM files.
struct Certificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    pem: String,
}

fn self_signed(dir: &Path, name: &str) -> Certificate {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let pem = certified.cert.pem();
    let cert_file = dir.join(format!("{name}-cert.pem"));
    let key_file = dir.join(format!("{name}-key.pem"));
    std::fs::write(&cert_file, &pem).unwrap();
    std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
    Certificate {
        cert_file,
        key_file,
        pem,
    }
}

/// A running server whose TCP and HTTP listeners both serve TLS with a
/// self-signed certificate for `localhost`.
struct TlsServer {
    server: RunningServer,
    cert: Certificate,
    _dir: tempfile::TempDir,
}

async fn tls_server() -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "localhost");
    let server = start_server_with(&dir.path().join("data"), |config| {
        for tls in [&mut config.tcp.tls, &mut config.http.tls] {
            tls.enabled = true;
            tls.cert_file = cert.cert_file.clone();
            tls.key_file = cert.key_file.clone();
        }
    })
    .await;
    TlsServer {
        server,
        cert,
        _dir: dir,
    }
}

impl TlsServer {
    /// The SDK's TCP client with TLS on, trusting the certificate, not yet
    /// connected.
    fn sdk_client(&self) -> TcpClient {
        TcpClient::create(Arc::new(TcpClientConfig {
            server_address: localhost(self.server.tcp_addr.unwrap()),
            tls_enabled: true,
            tls_domain: "localhost".to_string(),
            tls_ca_file: Some(self.cert.cert_file.display().to_string()),
            ..TcpClientConfig::default()
        }))
        .unwrap()
    }

    /// The SDK's TLS TCP client, connected and logged in as root.
    async fn sdk_login(&self) -> TcpClient {
        let client = self.sdk_client();
        tokio::time::timeout(STEP, client.connect())
            .await
            .unwrap()
            .unwrap();
        client.login_user("iggy", "iggy").await.unwrap();
        client
    }
}

fn localhost(addr: SocketAddr) -> String {
    format!("localhost:{}", addr.port())
}

fn message(payload: &str) -> IggyMessage {
    IggyMessage::builder()
        .payload(payload.to_string().into())
        .build()
        .unwrap()
}

/// Creates a stream and a topic, sends one message and polls it back.
async fn round_trip(client: &dyn Client, stream: &str, payload: &str) {
    let s = Identifier::named(stream).unwrap();
    let t = Identifier::named("events").unwrap();
    client.create_stream(stream).await.unwrap();
    client
        .create_topic(&s, "events", &TopicCreateOptions::default())
        .await
        .unwrap();
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut [message(payload)],
        )
        .await
        .unwrap();
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let polled = client
        .poll_messages(
            &s,
            &t,
            Some(0),
            &consumer,
            &PollingStrategy::offset(0),
            10,
            false,
        )
        .await
        .unwrap();
    let payloads: Vec<&[u8]> = polled.messages.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(payloads, [payload.as_bytes()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tcp_tls_when_the_sdk_tls_client_connects_then_it_logs_in_sends_and_polls() {
    // Given a server with TLS on its TCP listener, and the SDK's TLS client
    // trusting the self-signed certificate.
    let tls = tls_server().await;
    let client = tls.sdk_client();

    // When it connects and logs in as iggy/iggy.
    tokio::time::timeout(STEP, client.connect())
        .await
        .unwrap()
        .unwrap();
    let identity = client.login_user("iggy", "iggy").await.unwrap();

    // Then it is root and a stream, a send and a poll work over TLS.
    assert_eq!(identity.user_id, 0);
    tokio::time::timeout(STEP, round_trip(&client, "tls-orders", "over tls"))
        .await
        .unwrap();

    // And the connection string's options do the same.
    let url = format!(
        "iggy://iggy:iggy@{}?tls=true&tls_domain=localhost&tls_ca_file={}",
        localhost(tls.server.tcp_addr.unwrap()),
        tls.cert.cert_file.display()
    );
    let by_string = IggyClient::from_connection_string(&url).unwrap();
    tokio::time::timeout(STEP, by_string.connect())
        .await
        .unwrap()
        .unwrap();
    let streams = by_string.get_streams().await.unwrap();
    assert_eq!(streams.len(), 1);
    tls.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tcp_tls_when_a_plaintext_client_connects_then_it_fails_cleanly_and_others_are_served()
 {
    // Given a server with TLS on its TCP listener and a TLS client logged in.
    let tls = tls_server().await;
    let server = &tls.server;
    let tls_client = tls.sdk_login().await;

    // When the SDK's plaintext client (no redial) tries the same port.
    let plain = TcpClient::create(Arc::new(TcpClientConfig {
        server_address: server.tcp_addr.unwrap().to_string(),
        reconnection: TcpClientReconnectionConfig {
            enabled: false,
            ..TcpClientReconnectionConfig::default()
        },
        ..TcpClientConfig::default()
    }))
    .unwrap();
    let attempt = tokio::time::timeout(STEP, async {
        plain.connect().await?;
        plain.login_user("iggy", "iggy").await
    })
    .await;

    // Then it gets an error, not an answer and not a hang.
    let outcome = attempt.expect("the plaintext client is answered within the bound");
    assert!(outcome.is_err(), "{outcome:?}");

    // And a raw plaintext frame is met with a closed connection.
    let mut raw = tokio::net::TcpStream::connect(server.tcp_addr.unwrap())
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raw.write_all(&[0u8; 256]).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(STEP, raw.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the server closes the connection");
    assert!(
        buf.len() < 256,
        "no Iggy reply, at most a TLS alert: {buf:?}"
    );

    // And the TLS client is still served, as is a new one.
    tls_client.ping().await.unwrap();
    tokio::time::timeout(STEP, round_trip(&tls_client, "still-served", "yes"))
        .await
        .unwrap();
    let another = tls.sdk_login().await;
    assert_eq!(another.get_streams().await.unwrap().len(), 1);
    tls.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_https_when_reqwest_trusts_the_certificate_then_it_logs_in_and_lists_streams() {
    // Given a server serving HTTPS with a self-signed certificate, and a
    // stream created over TLS TCP.
    let tls = tls_server().await;
    let (server, cert) = (&tls.server, &tls.cert);
    assert!(server.http_url().starts_with("https://"));
    tls.sdk_login()
        .await
        .create_stream("over-https")
        .await
        .unwrap();
    let base = format!("https://{}", localhost(server.local_addr));
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.pem.as_bytes()).unwrap())
        .timeout(STEP)
        .build()
        .unwrap();

    // When it logs in and lists the streams over HTTPS.
    let login = json_of(
        client
            .post(format!("{base}/users/login"))
            .json(&serde_json::json!({"username": "iggy", "password": "iggy"})),
    )
    .await;
    let token = login["access_token"]["token"].as_str().unwrap().to_string();
    let streams = json_of(client.get(format!("{base}/streams")).bearer_auth(token)).await;

    // Then the stream is there.
    assert_eq!(streams[0]["name"], "over-https", "{streams}");

    // And plain HTTP to the HTTPS port gets no answer.
    let plain = reqwest::Client::builder().timeout(STEP).build().unwrap();
    let refused = plain
        .get(format!("http://{}/streams", server.local_addr))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    tls.server.shutdown().await.unwrap();
}

/// A successful answer's JSON body.
async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    let answer = request.send().await.unwrap().error_for_status().unwrap();
    answer.json().await.unwrap()
}

/// The SDK's `HttpClient` takes no CA of its own: its reqwest client trusts
/// the platform's roots, which on Linux `SSL_CERT_FILE` names. Setting that
/// variable in this process would change every other test's clients (and
/// needs `unsafe`), so the SDK client runs in a child process of this test
/// binary, [`sdk_http_client_in_a_child`], with the variable set there only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_https_when_the_sdk_http_client_trusts_the_certificate_then_it_round_trips() {
    // Given a server serving HTTPS with a self-signed certificate.
    let tls = tls_server().await;

    // When the SDK's HttpClient, trusting it through SSL_CERT_FILE, drives it.
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "tls::sdk_http_client_in_a_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_URL_ENV,
            format!("https://{}", localhost(tls.server.local_addr)),
        )
        .env("SSL_CERT_FILE", &tls.cert.cert_file)
        .env_remove("SSL_CERT_DIR")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .unwrap()
        .unwrap();

    // Then it logged in, created a stream, sent and polled over HTTPS.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{stderr}"
    );
    tls.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the SDK HttpClient over HTTPS: run in a child process by \
            given_https_when_the_sdk_http_client_trusts_the_certificate_then_it_round_trips"]
async fn sdk_http_client_in_a_child() {
    let Ok(url) = std::env::var(CHILD_URL_ENV) else {
        eprintln!("{CHILD_URL_ENV} is not set: this test only runs as its parent's child");
        return;
    };
    let client = HttpClient::new(&url).unwrap();
    tokio::time::timeout(STEP, async {
        client.login_user("iggy", "iggy").await.unwrap();
        round_trip(&client, "sdk-https", "over https").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tls_with_a_missing_certificate_when_starting_then_the_error_names_the_path() {
    // Given TLS enabled on the TCP listener with a certificate file that does
    // not exist.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-cert.pem");
    let key = dir.path().join("key.pem");

    // When the server starts.
    let started = try_start_server_on(
        Arc::new(DiskStorage::new()),
        &dir.path().join("data"),
        |c| {
            c.tcp.tls.enabled = true;
            c.tcp.tls.cert_file = missing.clone();
            c.tcp.tls.key_file = key.clone();
        },
    )
    .await;

    // Then it fails with an error naming the setting and the path.
    let err = started.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("tcp.tls.cert_file"), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_https_with_a_bad_key_when_starting_then_the_error_names_it_and_shows_none_of_it() {
    // Given a valid certificate, and as the key: first garbage in PEM
    // clothes, then the key of another certificate.
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "one");
    let other = self_signed(dir.path(), "other");
    let garbage = dir.path().join("garbage-key.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN PRIVATE KEY-----\nTOP-SECRET-BYTES\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();

    for (key, expected) in [
        (&garbage, garbage.display().to_string()),
        (&other.key_file, "cannot be used together".to_string()),
    ] {
        // When the server starts with it on HTTP.
        let started = try_start_server_on(
            Arc::new(DiskStorage::new()),
            &dir.path().join("data"),
            |c| {
                c.http.tls.enabled = true;
                c.http.tls.cert_file = cert.cert_file.clone();
                c.http.tls.key_file = key.clone();
            },
        )
        .await;

        // Then it fails naming the problem, and quotes nothing of the key.
        let err = started.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("http.tls"), "{err}");
        assert!(err.contains(&expected), "{err}");
        assert!(!err.contains("TOP-SECRET"), "{err}");
    }
}
