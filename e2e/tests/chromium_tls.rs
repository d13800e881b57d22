//! A relay serving HTTPS itself (`serve --tls-cert/--tls-key`, as on a VPS without a proxy): the extension pairs
//! with its `https://` address in the real Chromium and delivers a conversation to it. The certificate is made for
//! the test (the harness's Chromium accepts self-signed certificates, as it does for the fixture sites); the relay
//! is reached directly, not through the counting proxy (which speaks plain HTTP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_e2e::fixtures;
use personkit_e2e::session::{LAND_TIMEOUT, Session};

#[test]
fn the_extension_pairs_with_a_relay_serving_https_and_delivers_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = personkit_e2e::server::self_signed_pem(dir.path()).unwrap();

    let s = Session::start_unpaired(
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
        "",
    )
    .unwrap();
    let code = s.relay.pairing_code.clone().expect("a pairing code");
    let url = format!("https://localhost:{}/", s.relay.port);
    s.pair_at(&url, &code).unwrap();
    let status = s
        .popup
        .eval("document.querySelector('#pair-status').textContent")
        .unwrap();
    assert!(
        status
            .as_str()
            .unwrap_or_default()
            .contains(&format!("https://localhost:{}", s.relay.port)),
        "{status}"
    );
    s.set_surface("browser-ext:chatgpt", true).unwrap();
    let case = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/short")
        .unwrap();
    s.open_case(&case).unwrap();
    let problems = s.wait_landed(&case, LAND_TIMEOUT).unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Nothing went through the plain-HTTP proxy: every request was HTTPS to the relay itself.
    assert!(
        s.proxy.seen().is_empty(),
        "requests went through the proxy: {:?}",
        s.proxy.seen()
    );
}
