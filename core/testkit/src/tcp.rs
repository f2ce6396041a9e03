//! TCP fixtures (formerly `tests/tcp_support/mod.rs`): the official SDK's
//! `TcpClient` logged in to a running server, and a raw frame connection that
//! speaks the Iggy 0.11 framing with request payloads encoded by the SDK's
//! own wire types (`iggy_binary_protocol`), so the server's decoder is
//! checked against the SDK's encoder, not against itself.
//!
//! Invariant: a [`RawConn`] numbers its requests as the SDK does (register
//! is request 0, every later request one more) and carries the session its
//! login bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use iggy::prelude::{Client, TcpClient, TcpClientConfig, UserClient};
use sluice_server::server::RunningServer;
use sluice_server::tcp::codec::operation_for;
use sluice_server::tcp::frame::{HEADER_SIZE, ReplyHeader, RequestHeader, op};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{ROOT_PASSWORD, ROOT_USER};

pub fn tcp_addr(server: &RunningServer) -> SocketAddr {
    server.tcp_addr.expect("the TCP listener is on")
}

/// The SDK's TCP client, connected (not logged in).
pub async fn sdk_client(server: &RunningServer) -> TcpClient {
    let client = TcpClient::create(Arc::new(TcpClientConfig {
        server_address: tcp_addr(server).to_string(),
        ..TcpClientConfig::default()
    }))
    .unwrap();
    client.connect().await.unwrap();
    client
}

/// The SDK's TCP client, logged in as root.
pub async fn sdk_login(server: &RunningServer) -> TcpClient {
    let client = sdk_client(server).await;
    client.login_user(ROOT_USER, ROOT_PASSWORD).await.unwrap();
    client
}

/// One raw connection: frames built by hand, payloads by the SDK's encoders.
pub struct RawConn {
    pub stream: TcpStream,
    client: u128,
    request: u64,
    pub session: u64,
}

/// A reply: the status (0 or Iggy's error code) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawReply {
    pub status: u32,
    pub body: Vec<u8>,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> RawConn {
        RawConn {
            stream: TcpStream::connect(addr).await.unwrap(),
            client: 0x5eed_u128 << 64 | u128::from(rand_u32()),
            request: 0,
            session: 0,
        }
    }

    /// The header the SDK would write for `code` with `payload`.
    pub fn header(&mut self, code: u32, payload_len: usize) -> [u8; HEADER_SIZE] {
        let operation = operation_for(code);
        if operation != op::REGISTER {
            self.request += 1;
        }
        RequestHeader {
            size: u32::try_from(HEADER_SIZE + payload_len).unwrap(),
            client: self.client,
            request_checksum: 0,
            request: if operation == op::REGISTER {
                0
            } else {
                self.request
            },
            operation,
            session: if operation == op::REGISTER {
                0
            } else {
                self.session
            },
            reserved_code: if operation == op::NON_REPLICATED {
                code
            } else {
                0
            },
        }
        .encode()
    }

    pub async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Reads one reply; `None` if the server closed the connection (or
    /// nothing came within 10 s).
    pub async fn read_reply(&mut self) -> Option<RawReply> {
        let mut header = [0u8; HEADER_SIZE];
        let read =
            tokio::time::timeout(Duration::from_secs(10), self.stream.read_exact(&mut header))
                .await;
        match read {
            Ok(Ok(_)) => {}
            _ => return None,
        }
        let parsed = ReplyHeader::parse(&header)?;
        let mut body = vec![0u8; parsed.size as usize - HEADER_SIZE];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(RawReply {
            status: parsed.status,
            body,
        })
    }

    /// Sends one request and reads its reply.
    pub async fn call(&mut self, code: u32, payload: &[u8]) -> Option<RawReply> {
        let header = self.header(code, payload.len());
        let mut frame = header.to_vec();
        frame.extend_from_slice(payload);
        self.write_raw(&frame).await.ok()?;
        self.read_reply().await
    }

    /// Logs in as root (the SDK's login payload) and binds the session.
    pub async fn login(&mut self) {
        use iggy_binary_protocol::requests::users::LoginRegisterRequest;
        use iggy_binary_protocol::{
            ClientVersionInfo, IGGY_PROTOCOL_VERSION, WireEncode, WireName,
        };
        let request = LoginRegisterRequest {
            version_info: ClientVersionInfo {
                protocol_version: IGGY_PROTOCOL_VERSION,
                sdk_name: WireName::new("raw-test").unwrap(),
                sdk_version: WireName::new("0.11.0").unwrap(),
            },
            username: WireName::new(ROOT_USER).unwrap(),
            password: ROOT_PASSWORD.to_string().into(),
            client_context: None,
        };
        let reply = self
            .call(40, &request.to_bytes())
            .await
            .expect("a login reply");
        assert_eq!(reply.status, 0, "login failed");
        // Result section (count 0), then user id, then the session.
        let session = u64::from_le_bytes(reply.body[8..16].try_into().unwrap());
        assert!(session > 0);
        self.session = session;
    }
}

fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
