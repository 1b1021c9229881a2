//! The real `bcctl` binary against a server that answers every request with
//! a 307 to a second listener: bcctl reports the redirect (status and
//! `Location`) and the second listener receives no request, so a secret's
//! value sent by `secrets put` never leaves for the redirect's target.

#![expect(
    clippy::expect_used,
    reason = "tests expect answers; a panic fails the test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const SECRET: &str = "the-secret-value-that-must-not-travel";

/// Reads one HTTP/1.1 request (head and `Content-Length` body).
fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("a request line") == 0 {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().expect("a length");
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the body");
    head + &String::from_utf8_lossy(&body)
}

/// Answers every connection on `listener` with `answer`, sending each
/// request it read on `seen` first.
fn serve(listener: TcpListener, answer: String, seen: mpsc::Sender<String>) {
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let request = read_request(&mut stream);
            if seen.send(request).is_err() {
                return;
            }
            let _ = stream.write_all(answer.as_bytes());
        }
    });
}

#[test]
fn a_redirect_is_reported_and_not_followed() {
    let target = TcpListener::bind("127.0.0.1:0").expect("bind");
    let target_url = format!("http://{}/elsewhere", target.local_addr().expect("addr"));
    let (to_target, at_target) = mpsc::channel();
    let ok = "{\"secret\":{\"fingerprint\":\"x\"},\"items\":[],\"hasMore\":false}";
    serve(
        target,
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{ok}",
            ok.len()
        ),
        to_target,
    );
    let redirector = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", redirector.local_addr().expect("addr"));
    let (to_redirector, at_redirector) = mpsc::channel();
    serve(
        redirector,
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target_url}\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        ),
        to_redirector,
    );

    for (args, stdin) in [
        (
            &["--tenant", "acme", "secrets", "put", "gce-token"][..],
            SECRET,
        ),
        (&["--tenant", "acme", "secrets", "list"][..], ""),
    ] {
        // No profile: the configuration directory holds nothing.
        let config = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bcctl-redirects");
        let mut child = Command::new(env!("CARGO_BIN_EXE_bcctl"))
            .args(args)
            .env_remove("BC_PROFILE")
            .env("BC_ENDPOINT", &endpoint)
            .env("BC_TOKEN", "tok")
            .env("XDG_CONFIG_HOME", &config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bcctl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        let out = child.wait_with_output().expect("bcctl");
        let stderr = String::from_utf8_lossy(&out.stderr);

        let first = at_redirector
            .recv_timeout(Duration::from_secs(60))
            .expect("the first server got the request");
        if !stdin.is_empty() {
            assert!(first.contains(SECRET), "{first}");
        }
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            stderr.contains("307") && stderr.contains(&target_url),
            "{args:?}: the error names the status and Location: {stderr}"
        );
        assert!(stderr.contains("redirect"), "{stderr}");
        // bcctl has exited: whatever it sent has been read and reported.
        assert!(
            at_target.try_recv().is_err(),
            "{args:?}: the redirect's target received a request"
        );
    }
}
