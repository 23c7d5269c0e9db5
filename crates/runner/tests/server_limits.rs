//! The server over real TCP connections against clients that misbehave: connections that never
//! finish their headers are closed by the read timeout, a body that stalls is cut off, the
//! connection cap holds, and large prompts tokenized by other clients do not stall a stream.

mod server_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner::server::{self, AppState, ServerConfig};
use serde_json::json;
use server_support::{http_get, worker, NAME};

/// A server on a free local port with `config`, on its own runtime thread; its address.
fn spawn_server(config: ServerConfig) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().to_string()).unwrap();
            let state = AppState::new(Arc::new(worker(64)), config);
            server::serve(listener, state, std::future::pending())
                .await
                .unwrap();
        });
    });
    rx.recv().unwrap()
}

/// A connection to `addr` that has sent `POST /api/generate` with the JSON `body` (reads time out
/// after `timeout`).
fn post(addr: &str, body: &str, timeout: Duration) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(timeout)).unwrap();
    write!(
        tcp,
        "POST /api/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    tcp
}

/// Whether the server closed `tcp` within `within` (a read returns end of file or an error).
fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    tcp.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a 408 or 400 answer, then the close
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn slow_and_half_open_clients_are_disconnected() {
    let addr = spawn_server(ServerConfig {
        read_timeout: Duration::from_secs(1),
        max_connections: 4,
        ..ServerConfig::default()
    });
    // Half-sent headers.
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"POST /api/generate HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    // Headers, then a body that stops halfway.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled
        .write_all(
            b"POST /api/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"model\":",
        )
        .unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut half, Duration::from_secs(5)),
        "half-sent headers"
    );
    assert!(
        closed_within(&mut stalled, Duration::from_secs(5)),
        "stalled body"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The cap: with 4 connections held open, a fifth waits; once they close it is served.
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    drop(held);
    let text = http_get(&addr, "/api/version");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn large_prompts_from_other_clients_do_not_stall_a_stream() {
    let addr = spawn_server(ServerConfig {
        max_body_bytes: 8 << 20,
        ..ServerConfig::default()
    });
    // Three clients each send a 3 MB prompt (refused as longer than the context once tokenized).
    let big: Vec<std::thread::JoinHandle<()>> = (0..3)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body = json!({"model": NAME, "prompt": "in the beginning ".repeat(180_000),
                                  "raw": true, "stream": false})
                .to_string();
                let mut tcp = post(&addr, &body, Duration::from_secs(120));
                let mut text = String::new();
                let _ = tcp.read_to_string(&mut text);
            })
        })
        .collect();
    // Meanwhile (once the uploads are under way) a stream as long as the context allows: the
    // gaps between its chunks stay short.
    std::thread::sleep(Duration::from_millis(300));
    let body = json!({"model": NAME, "prompt": "In the beginning", "raw": true, "stream": true,
                      "options": {"temperature": 0, "num_predict": 1000}})
    .to_string();
    let mut tcp = post(&addr, &body, Duration::from_secs(60));
    let mut gaps = Vec::new();
    let mut last = None;
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let now = Instant::now();
                if let Some(before) = last.replace(now) {
                    gaps.push(now.duration_since(before));
                }
            }
        }
    }
    for handle in big {
        handle.join().unwrap();
    }
    assert!(gaps.len() > 10, "the stream sent {} pieces", gaps.len() + 1);
    gaps.sort();
    let worst = *gaps.last().unwrap();
    let median = gaps[gaps.len() / 2];
    assert!(
        worst < median + Duration::from_millis(250),
        "a gap of {worst:?} against a median of {median:?}"
    );
}

/// Clients that send bodies of random sizes in random pieces at random pace, and hang up at
/// random points: every complete answer is a 2xx or 4xx, never a 5xx, and the server answers a
/// plain request afterwards. Bounded: 24 clients, bodies up to 512 KiB, pauses up to 40 ms.
#[test]
fn random_sizes_paces_and_hang_ups_never_break_the_server() {
    let addr = spawn_server(ServerConfig {
        read_timeout: Duration::from_secs(2),
        max_tokens: 4,
        ..ServerConfig::default()
    });
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound.max(1)
    };
    let clients: Vec<std::thread::JoinHandle<Option<String>>> = (0..24)
        .map(|_| {
            let words = 1 + next(32 * 1024) as usize;
            let pieces = 1 + next(8) as usize;
            let pause = Duration::from_millis(next(40));
            let hang_up_at = next(3); // 0: hang up midway, else send everything
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body =
                    json!({"model": NAME, "prompt": "a b c d e f g h ".repeat(words / 8 + 1),
                                  "raw": true, "stream": false,
                                  "options": {"temperature": 0, "num_predict": 2}})
                    .to_string();
                let head = format!(
                    "POST /api/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let mut tcp = TcpStream::connect(&addr).ok()?;
                tcp.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
                tcp.write_all(head.as_bytes()).ok()?;
                let piece = body.len().div_ceil(pieces);
                for (i, chunk) in body.as_bytes().chunks(piece).enumerate() {
                    if hang_up_at == 0 && i * 2 >= pieces {
                        return None; // dropped: the connection closes mid-body
                    }
                    tcp.write_all(chunk).ok()?;
                    std::thread::sleep(pause);
                }
                let mut text = String::new();
                tcp.read_to_string(&mut text).ok()?;
                Some(text)
            })
        })
        .collect();
    for client in clients {
        if let Some(text) = client.join().unwrap() {
            let status = text.split_whitespace().nth(1).unwrap_or("");
            assert!(
                status.starts_with('2') || status.starts_with('4'),
                "status {status}: {}",
                text.chars().take(300).collect::<String>()
            );
        }
    }
    let text = http_get(&addr, "/api/version");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}
