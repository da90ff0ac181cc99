//! `berth queues`: the task queues as a table.
//!
//! The data is the `queues:` section of the public Dump (the broker's view, forwarded by
//! lifecycle), so the command needs no API of its own and shows exactly what Dump shows.

use serde::Deserialize;

/// The part of the Dump document this command reads; every other key is ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DumpQueues {
    #[serde(default)]
    queues: Vec<QueueRow>,
    /// Set when lifecycle could not reach the broker: the queues are unknown, not empty.
    #[serde(default)]
    queues_unavailable: Option<String>,
}

/// One queue as Dump renders it (see lifecycle's `dump::QueueDoc`).
#[derive(Deserialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct QueueRow {
    name: String,
    length: i64,
    /// `<kind> <task id>` of the task at the head.
    #[serde(default)]
    head: String,
    #[serde(default)]
    head_attempts: i64,
    #[serde(default)]
    head_last_error: String,
    #[serde(default)]
    lease_holder: String,
}

/// Longest last-error excerpt shown in the table; `berth dump` has the full text.
const ERROR_WIDTH: usize = 60;

/// Renders the queues of the Dump YAML `dump` as a table, or says that there are none.
pub fn table(dump: &str) -> Result<String, String> {
    let doc: DumpQueues =
        serde_saphyr::from_str(dump).map_err(|e| format!("cannot read the Dump's queues: {e}"))?;
    if let Some(reason) = &doc.queues_unavailable {
        return Err(format!("the queues are unknown: {reason}"));
    }
    if doc.queues.is_empty() {
        return Ok("no queued or running tasks\n".to_owned());
    }
    let header = [
        "QUEUE",
        "LENGTH",
        "HEAD",
        "ATTEMPTS",
        "LEASED BY",
        "LAST ERROR",
    ]
    .map(str::to_owned);
    let mut rows = vec![header];
    for q in &doc.queues {
        rows.push([
            q.name.clone(),
            q.length.to_string(),
            q.head.clone(),
            q.head_attempts.to_string(),
            if q.lease_holder.is_empty() {
                "-".to_owned()
            } else {
                q.lease_holder.clone()
            },
            excerpt(&q.head_last_error),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    Ok(rows
        .iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
                + "\n"
        })
        .collect())
}

/// The first line of `error`, cut to [`ERROR_WIDTH`] characters.
fn excerpt(error: &str) -> String {
    let line = error.lines().next().unwrap_or_default();
    if line.chars().count() > ERROR_WIDTH || error.lines().nth(1).is_some() {
        let cut: String = line.chars().take(ERROR_WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"packages:
- key: app/default/hello
  queues:
    app/default/hello: 2
queues:
- name: app/default/hello
  length: 2
  head: Run 7f3a
  headAttempts: 3
  headLastError: "hook failed: exit status 1\nstderr: boom"
  leaseHolder: worker-1
- name: module/metrics
  length: 1
  head: Startup 9c1d
  headAttempts: 0
"#;

    #[test]
    fn queues_are_listed_with_head_attempts_holder_and_error() {
        let table = table(DUMP).expect("table");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(
            lines[0].starts_with("QUEUE") && lines[0].ends_with("LAST ERROR"),
            "{table}"
        );
        let cols = |line: &str| {
            line.split("  ")
                .filter(|c| !c.is_empty())
                .map(str::trim)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cols(lines[1]),
            [
                "app/default/hello",
                "2",
                "Run 7f3a",
                "3",
                "worker-1",
                "hook failed: exit status 1…"
            ]
        );
        assert_eq!(
            cols(lines[2]),
            ["module/metrics", "1", "Startup 9c1d", "0", "-"]
        );
    }

    #[test]
    fn no_queues_says_so() {
        assert_eq!(
            table("packages: []\nqueues: []\n").expect("table"),
            "no queued or running tasks\n"
        );
    }

    #[test]
    fn an_unreachable_broker_is_an_error_not_an_empty_table() {
        let err = table("packages: []\nqueues: []\nqueuesUnavailable: 'queue broker: Unavailable: connection refused'\n")
            .expect_err("unknown queues");
        assert!(
            err.contains("unknown") && err.contains("connection refused"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_dump_is_an_error_naming_the_queues() {
        let err = table("queues: [{name: 3, length: many}]").expect_err("malformed");
        assert!(err.contains("Dump's queues"), "{err}");
    }
}
