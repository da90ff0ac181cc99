//! Clients of replicated services: an endpoint flag may name several replicas
//! (`http://a:7001,http://b:7001`), and calls are spread over those that answer.
//!
//! tonic balances a list of endpoints (power of two choices over `tower::balance`), but its
//! lazily connected endpoints report ready even when nothing listens there, so with a plain list
//! every other call would go to a dead replica and fail. So the list is fed through tonic's
//! discovery channel by a small prober written here: every [`PROBE_EVERY`] it opens a TCP
//! connection to each replica and keeps in the balancer only those that accept one — what a
//! Kubernetes Service's endpoints do with readiness. A call already sent to a replica that dies
//! fails once and its caller retries, as with any transport error.

use std::collections::HashSet;
use std::time::Duration;

use tonic::transport::Endpoint;
use tonic::transport::channel::Change;

/// Most replicas one endpoint flag may name.
pub const MAX_REPLICAS: usize = 16;
/// How often the replicas are probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Longest one probe waits for a TCP connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The endpoints a flag names, split on commas; the error names what is wrong.
pub fn split(endpoints: &str) -> Result<Vec<&str>, String> {
    let list: Vec<&str> = endpoints.split(',').map(str::trim).collect();
    if list.iter().any(|e| e.is_empty()) {
        return Err(format!("endpoint list {endpoints:?} has an empty entry"));
    }
    if list.len() > MAX_REPLICAS {
        return Err(format!(
            "endpoint list {endpoints:?} names {} replicas; at most {MAX_REPLICAS}",
            list.len()
        ));
    }
    Ok(list)
}

/// A channel over `endpoints` (two or more), probed in the background while the channel lives.
/// Must be called inside a tokio runtime.
pub(crate) fn balanced(endpoints: Vec<Endpoint>) -> tonic::transport::Channel {
    let (channel, changes) = tonic::transport::Channel::balance_channel(endpoints.len() * 2 + 1);
    tokio::spawn(probe(endpoints, changes));
    channel
}

async fn probe(
    endpoints: Vec<Endpoint>,
    changes: tokio::sync::mpsc::Sender<Change<usize, Endpoint>>,
) {
    let mut inserted: HashSet<usize> = HashSet::new();
    loop {
        let mut up = Vec::with_capacity(endpoints.len());
        for endpoint in &endpoints {
            up.push(reachable(endpoint).await);
        }
        // With none reachable, every replica stays in: calls then fail fast with the connection
        // error instead of waiting for a replica to appear.
        let none = !up.iter().any(|u| *u);
        for (i, endpoint) in endpoints.iter().enumerate() {
            let want = up[i] || none;
            let change = match (want, inserted.contains(&i)) {
                (true, false) => Change::Insert(i, endpoint.clone()),
                (false, true) => Change::Remove(i),
                _ => continue,
            };
            if changes.send(change).await.is_err() {
                return; // the channel is gone
            }
            if want {
                inserted.insert(i);
            } else {
                inserted.remove(&i);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(PROBE_EVERY) => {}
            _ = changes.closed() => return,
        }
    }
}

async fn reachable(endpoint: &Endpoint) -> bool {
    let uri = endpoint.uri();
    let Some(host) = uri.host() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect((host, port))).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_split_and_bounded() {
        assert_eq!(split("http://a:1").unwrap(), ["http://a:1"]);
        assert_eq!(
            split("http://a:1, http://b:2").unwrap(),
            ["http://a:1", "http://b:2"]
        );
        assert!(
            split("http://a:1,,http://b:2")
                .unwrap_err()
                .contains("empty entry")
        );
        let many = vec!["http://a:1"; MAX_REPLICAS + 1].join(",");
        assert!(split(&many).unwrap_err().contains("at most 16"));
    }

    /// Calls go only to the replica that listens, even though the dead one is listed first.
    #[tokio::test]
    async fn calls_avoid_a_replica_that_does_not_listen() {
        use tonic_health::pb::HealthCheckRequest;
        use tonic_health::pb::health_client::HealthClient;
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_addr = live.local_addr().unwrap();
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(live)),
        );
        let list = format!("http://{dead_addr},http://{live_addr}");
        let channel = crate::connect_lazy(&list, None, crate::Role::Lifecycle).unwrap();
        let mut client = HealthClient::new(channel);
        for _ in 0..20 {
            client
                .check(HealthCheckRequest::default())
                .await
                .expect("every call reaches the live replica");
        }
    }
}
