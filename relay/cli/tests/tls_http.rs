//! `serve --tls-cert/--tls-key`: the real relay serves HTTPS with a certificate made for the test, pairs and takes
//! turns over it; a client that does not trust the certificate, or speaks plain HTTP to the port, gets nothing;
//! unreadable or mismatched PEM files stop `serve` with a message naming the file; with TLS of its own the relay
//! may listen on a non-loopback address without `--allow-remote`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use personkit_testkit::Relay;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

struct Pem {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM files under `dir`.
fn self_signed(dir: &Path, name: &str) -> Pem {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(std::net::IpAddr::from([
            127, 0, 0, 1,
        ])));
    let cert = params.self_signed(&key).unwrap();
    let pem = Pem {
        cert: dir.join(format!("{name}-cert.pem")),
        key: dir.join(format!("{name}-key.pem")),
        der: cert.der().clone(),
    };
    std::fs::write(&pem.cert, cert.pem()).unwrap();
    std::fs::write(&pem.key, key.serialize_pem()).unwrap();
    pem
}

fn client(trusted: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// One HTTPS request (`Connection: close`); `Err` when the TLS handshake or the exchange fails.
fn https(
    config: &Arc<rustls::ClientConfig>,
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).map_err(|e| e.to_string())?;
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    match tls.read_to_end(&mut out) {
        Ok(_) => {}
        // Some servers close without close_notify; what was read is the answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {text:?}"))?;
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    Ok((status, json))
}

#[test]
fn the_relay_serves_https_with_the_given_certificate_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let pem = self_signed(dir.path(), "relay");
    let db = dir.path().join("corpus.sqlite");
    let relay = Relay::start(
        &db,
        &[
            "--tls-cert",
            pem.cert.to_str().unwrap(),
            "--tls-key",
            pem.key.to_str().unwrap(),
        ],
    );
    let port = relay.port();
    assert!(
        relay
            .stdout_lines()
            .iter()
            .any(|l| l.starts_with("personkit: listening on https://127.0.0.1:")),
        "{:?}",
        relay.stdout_lines()
    );
    let trusting = client(&pem.der);
    let (status, health) = https(&trusting, port, "GET", "/v1/health", None, None).unwrap();
    assert_eq!(status, 200, "{health}");

    // Pairing and a turn, over TLS.
    let code = relay.printed_pairing_code();
    let (status, paired) = https(
        &trusting,
        port,
        "POST",
        "/v1/pair",
        None,
        Some(&json!({"code": code, "device_name": "tls test"})),
    )
    .unwrap();
    assert_eq!(status, 200, "{paired}");
    let token = paired["token"].as_str().unwrap().to_owned();
    let item = personkit_testkit::turn(
        "browser-ext:chatgpt",
        "tls-1",
        personkit_shared::wire::Role::User,
        "over TLS only",
        Some(0),
    );
    let (status, stored) = https(
        &trusting,
        port,
        "POST",
        "/v1/observations",
        Some(&token),
        Some(&json!({"observations": [item]})),
    )
    .unwrap();
    assert_eq!(
        (status, stored["stored"].as_u64()),
        (200, Some(1)),
        "{stored}"
    );
    let messages = relay.cli_json(&["corpus", "messages", "--json"]);
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "over TLS only"),
        "{messages}"
    );

    // A client that trusts another certificate fails the handshake; plain HTTP gets no HTTP answer.
    let other = self_signed(dir.path(), "other");
    let refused = https(&client(&other.der), port, "GET", "/v1/health", None, None);
    assert!(refused.is_err(), "{refused:?}");
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "plain HTTP was answered: {:?}",
        String::from_utf8_lossy(&answer)
    );
    // The relay still serves TLS clients after the bad ones.
    assert_eq!(
        https(&trusting, port, "GET", "/v1/health", None, None)
            .unwrap()
            .0,
        200
    );
}

fn serve_fails(db: &Path, args: &[&str]) -> String {
    let addr: &[&str] = if args.contains(&"--addr") {
        &[]
    } else {
        &["--addr", "127.0.0.1:0"]
    };
    let out = Command::new(personkit_testkit::bin())
        .arg("serve")
        .arg("--db")
        .arg(db)
        .args(addr)
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn unreadable_or_mismatched_pem_files_stop_serve_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corpus.sqlite");
    let a = self_signed(dir.path(), "a");
    let b = self_signed(dir.path(), "b");
    let missing = dir.path().join("missing.pem");
    let err = serve_fails(
        &db,
        &[
            "--tls-cert",
            missing.to_str().unwrap(),
            "--tls-key",
            a.key.to_str().unwrap(),
        ],
    );
    assert!(
        err.contains("missing.pem") && err.contains("certificate"),
        "{err}"
    );
    let err = serve_fails(
        &db,
        &[
            "--tls-cert",
            a.cert.to_str().unwrap(),
            "--tls-key",
            a.cert.to_str().unwrap(),
        ],
    );
    assert!(
        err.contains("a-cert.pem") && err.contains("private key"),
        "{err}"
    );
    let err = serve_fails(
        &db,
        &[
            "--tls-cert",
            a.cert.to_str().unwrap(),
            "--tls-key",
            b.key.to_str().unwrap(),
        ],
    );
    assert!(err.contains("does not fit"), "{err}");
    let err = serve_fails(&db, &["--tls-cert", a.cert.to_str().unwrap()]);
    assert!(err.contains("--tls-key"), "{err}");
    // Nothing was written: no corpus was created by the refused starts.
    assert!(!db.exists());
}

#[test]
fn with_tls_of_its_own_the_relay_may_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corpus.sqlite");
    let pem = self_signed(dir.path(), "relay");
    // Without TLS, a non-loopback address is refused.
    let err = serve_fails(&db, &["--addr", "0.0.0.0:0"]);
    assert!(err.contains("--tls-cert"), "{err}");
    let mut child = Command::new(personkit_testkit::bin())
        .arg("serve")
        .arg("--db")
        .arg(&db)
        .args(["--addr", "0.0.0.0:0"])
        .args(["--tls-cert", pem.cert.to_str().unwrap()])
        .args(["--tls-key", pem.key.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut listening = None;
    for _ in 0..10 {
        line.clear();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("personkit: listening on ") {
            listening = Some(rest.to_owned());
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let listening = listening.expect("serve with TLS on 0.0.0.0 did not start");
    assert!(listening.starts_with("https://0.0.0.0:"), "{listening}");
}
