//! Archive repositories over HTTP(S): `archive: https://BASE/` (here `http://127.0.0.1`, the
//! loopback exception) is downloaded within the size limit, then verified, unpacked and
//! published like a local archive.

mod support;

use berth_package::{Limits, RepoError, Repositories, load, pack};
use support::{package_dir, write};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Serves `files` under `/dist/` over HTTP/1.0 on a loopback port (404 for anything else) and
/// returns the base URL. A test double only: one request per connection.
async fn serve(files: Vec<(String, Vec<u8>)>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let files = files.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut n = 0;
                while n < buf.len() {
                    match stream.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(read) => n += read,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("").to_owned();
                let response = match files
                    .iter()
                    .find(|(name, _)| path == format!("/dist/{name}"))
                {
                    Some((_, body)) => {
                        let mut r =
                            format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                                .into_bytes();
                        r.extend_from_slice(body);
                        r
                    }
                    None => b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                };
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}/dist/")
}

#[tokio::test]
async fn an_archive_url_is_downloaded_within_the_limit_and_published() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = package_dir(&work.path().join("src"), "demo", "1.0.0");
    write(&dir, "values.yaml", "greeting: hi\n");
    let packed = pack(&dir, Limits::default()).expect("pack");
    let base = serve(vec![("demo-1.0.0.tar.gz".into(), packed.bytes.clone())]).await;
    let mut repos = Repositories::default();
    repos
        .add_flag(&format!("web={base}"), work.path())
        .expect("a loopback http:// base is accepted");
    let source = repos.resolve("web").expect("configured").source;

    let dest = work.path().join("cache/demo/1.0.0");
    let fetched = source
        .fetch("demo", "1.0.0", &dest, Limits::default())
        .await
        .expect("fetched");
    assert_eq!(fetched.fetched.path, dest);
    let loaded = load(&dest).expect("the published package loads");
    assert_eq!(loaded.definition.name, "demo");

    let missing = work.path().join("cache/demo/2.0.0");
    let err = source
        .fetch("demo", "2.0.0", &missing, Limits::default())
        .await
        .expect_err("no such archive");
    assert!(matches!(err, RepoError::VersionNotFound { .. }), "{err}");
    assert!(!missing.exists());

    // Past the size limit the download stops and nothing is published.
    let small = Limits {
        max_total_bytes: 64,
        ..Limits::default()
    };
    let bounded = work.path().join("small/demo/1.0.0");
    let err = source
        .fetch("demo", "1.0.0", &bounded, small)
        .await
        .expect_err("over the limit");
    assert!(matches!(err, RepoError::LimitExceeded { .. }), "{err}");
    assert!(!bounded.exists());
}

#[test]
fn plain_http_is_refused_for_other_hosts() {
    let mut repos = Repositories::default();
    let err = repos
        .add_flag("web=http://example.com/dist/", std::path::Path::new("/"))
        .expect_err("plain http to another host");
    assert!(err.to_string().contains("must be https://"), "{err}");
}
