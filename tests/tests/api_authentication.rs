//! Authentication on by default (issue 30, design point 7, attack 9), through real processes
//! on the dev cluster (or the cluster `BERTH_TEST_KUBECONFIG` names): `berth up` started as the
//! README starts it makes a token (0600, in its data directory, kept across restarts) and
//! requires it; the CLI finds it with no flag; no command line holds it; a process without it
//! — a hook among them — is refused `Unauthenticated` and changes nothing.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, Proc, TestNamespace, journey};
use serde_json::{Value, json};

/// Longest a package may take to reach what a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

/// The NUL-separated command line of a running process.
fn cmdline(pid: u32) -> anyhow::Result<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    Ok(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// `berth` (the CLI) run in `cwd` against `server`, with no token from the harness: it finds
/// one itself, or not.
fn bare_cli(cwd: &Path, server: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(berth_tests::binary("berth"));
    command
        .current_dir(cwd)
        .env("BERTH_SERVER", server)
        .env_remove("BERTH_TOKEN")
        .env_remove("BERTH_TOKEN_FILE")
        .env_remove("BERTH_DATA_DIR")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

async fn output(mut command: tokio::process::Command) -> anyhow::Result<std::process::Output> {
    Ok(
        tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .context("the CLI did not finish")??,
    )
}

/// `berth up` with no flag but an OS-chosen port (and the real cluster when there is one),
/// started in `cwd` without the harness's token: its data directory is `./.berth`.
async fn up_in(cwd: &Path) -> anyhow::Result<Proc> {
    let mut command = tokio::process::Command::new(berth_tests::binary("berth"));
    command
        .current_dir(cwd)
        .args(["up", "--listen", "127.0.0.1:0"])
        .env_remove("BERTH_TOKEN")
        .env_remove("BERTH_TOKEN_FILE")
        .env_remove("BERTH_DATA_DIR");
    if let Some(real) = berth_devcluster::test_namespace::real_cluster() {
        command.arg("--kubeconfig").arg(real);
    }
    Proc::start_command(command, "listening on ").await
}

/// The README's first screen, with authentication: `berth up` makes its token, the CLI started
/// beside it finds it with no flag and works; the token is on no command line; a CLI without
/// it (started elsewhere) is refused `Unauthenticated` with a message saying where tokens come
/// from, and its Update changes nothing; the token survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_makes_a_token_the_cli_finds_and_no_command_line_holds() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let here = tempfile::tempdir()?;
    let elsewhere = tempfile::tempdir()?;
    let up = up_in(here.path()).await?;
    let server = up.endpoint();
    let token_file = here.path().join(".berth/token");
    let token = std::fs::read_to_string(&token_file)?.trim().to_owned();
    let checks = async {
        ensure!(
            token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "the token is 32 random bytes in hex: {token:?}"
        );
        let mode = std::fs::metadata(&token_file)?.permissions().mode() & 0o777;
        ensure!(mode == 0o600, "the token file is {mode:o}");
        let up_line = cmdline(up.pid().context("berth up runs")?)?;
        ensure!(
            !up_line.contains(&token),
            "berth up's command line: {up_line}"
        );

        // The CLI beside it: no flag, no variable but the server's address, and it works. (Its
        // command line is the one built here; reading it back from /proc raced the CLI's exit:
        // a finished CLI is a zombie whose cmdline is empty.)
        let mut list = bare_cli(here.path(), &server);
        list.arg("list");
        let typed: Vec<String> = list
            .as_std()
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        ensure!(
            typed == ["list"],
            "the CLI is run with the subcommand alone: {typed:?}"
        );
        let out = output(list).await?;
        ensure!(
            out.status.success(),
            "berth list beside berth up: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        // Elsewhere, without the token: refused, nothing changed.
        let mut update = bare_cli(elsewhere.path(), &server);
        update.args([
            "update",
            "hello",
            "--repo",
            berth_tests::EXAMPLES_REPO,
            "--version",
            "1.0.0",
        ]);
        let out = output(update).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success(),
            "an Update without the token succeeded"
        );
        ensure!(
            stderr.contains("Unauthenticated")
                && stderr.contains("--token-file")
                && stderr.contains(".berth/token"),
            "the refusal says where tokens come from: {stderr}"
        );
        let mut client = journey::connect_with(&server, &token).await?;
        let listed = client.list(v1::ListRequest::default()).await?.into_inner();
        ensure!(
            listed.packages.is_empty(),
            "the refused Update changed something: {:?}",
            listed.packages
        );

        // A token given by file elsewhere works; a wrong one is named as refused.
        let mut list = bare_cli(elsewhere.path(), &server);
        list.arg("--token-file").arg(&token_file).arg("list");
        let out = output(list).await?;
        ensure!(
            out.status.success(),
            "--token-file: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let wrong = elsewhere.path().join("wrong");
        std::fs::write(&wrong, "0123456789abcdef\n")?;
        let mut list = bare_cli(elsewhere.path(), &server);
        list.arg("--token-file").arg(&wrong).arg("list");
        let out = output(list).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && stderr.contains("Unauthenticated") && stderr.contains("wrong"),
            "a wrong token: {stderr}"
        );
        Ok(())
    }
    .await;
    up.stop().await;
    checks?;

    // Kept across a restart: the same token still works.
    let up = up_in(here.path()).await?;
    let again = std::fs::read_to_string(&token_file)?.trim().to_owned();
    let mut list = bare_cli(here.path(), &up.endpoint());
    list.arg("list");
    let out = output(list).await;
    up.stop().await;
    let out = out?;
    ensure!(again == token, "the token changed across a restart");
    ensure!(
        out.status.success(),
        "after the restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Writes package `name` 1.0.0 of `package_type` into `repo`: a chart without templates, a
/// settings schema taking an integer `round`, `hooks` (made executable) and `files` at the
/// version's root.
fn write_package(
    repo: &Path,
    name: &str,
    package_type: &str,
    hooks: &[(&str, String)],
    files: &[(&str, &[u8])],
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = repo.join(name).join("1.0.0");
    std::fs::create_dir_all(dir.join("hooks"))?;
    std::fs::create_dir_all(dir.join("openapi"))?;
    std::fs::write(
        dir.join("package.yaml"),
        format!("type: {package_type}\nname: {name}\nversion: 1.0.0\n"),
    )?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n"),
    )?;
    std::fs::write(
        dir.join("openapi/settings.yaml"),
        "type: object\nproperties:\n  round:\n    type: integer\n",
    )?;
    for (file, body) in hooks {
        let path = dir.join("hooks").join(file);
        std::fs::write(&path, body)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    for (file, body) in files {
        std::fs::write(dir.join(file), body)?;
    }
    Ok(())
}

/// A gRPC request frame (uncompressed) for `message`.
fn grpc_frame(message: &impl prost::Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend(
        u32::try_from(body.len())
            .expect("a small message")
            .to_be_bytes(),
    );
    frame.extend(body);
    frame
}

/// Attack 9 from inside: an App's hook (running as its principal's uid, berth being root)
/// tries to read `berth up`'s token and to Update a Module through the public API with
/// curl, as the attack did. The token file cannot be read and the Update is refused
/// `Unauthenticated` (gRPC status 16); the Module keeps its generation and settings.
/// Needs root (hooks run as other uids only then); skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_cannot_read_the_token_and_its_update_is_refused() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: hooks run as their principals' uids only when berth is root");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let real = berth_devcluster::test_namespace::real_cluster();
    let up = AllInOne::start(&data, real.as_deref()).await?;
    let result = async {
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let ns = TestNamespace::create(&kube, "gateauth").await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let victim = format!("gateauthmod{}", std::process::id());
        let module = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: victim.clone(),
            namespace: String::new(),
        };
        let update = |r: &v1::PackageRef, settings: Option<Value>| v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: repo.clone(),
            version: "1.0.0".into(),
            settings: settings.as_ref().map(berth_proto::json::to_struct),
            ..Default::default()
        };
        write_package(repo_dir.path(), &victim, "Module", &[], &[])?;
        // What the hook sends: the Module at round 666.
        let frame = grpc_frame(&update(&module, Some(json!({"round": 666}))));
        // The gateway refuses before it reads the request body and then resets the stream
        // (RST_STREAM NO_ERROR, as HTTP/2 allows); Debian's curl sometimes reports that as a
        // framing error instead of printing the answer, so the hook asks again, up to five times,
        // until it has a grpc-status to report.
        let hook = format!(
            "#!/bin/bash\n\
             if [ \"$1\" = --config ]; then echo '{{\"configVersion\":\"v1\",\"beforeHelm\":1}}'; exit 0; fi\n\
             read=$(cat {token} 2>&1 >/dev/null && echo READ)\n\
             for attempt in 1 2 3 4 5; do\n\
               answer=$(curl -sS --http2-prior-knowledge --max-time 20 -H 'content-type: application/grpc' -H 'te: trailers' \
                 --data-binary @\"$(dirname \"$0\")/../update.bin\" -D - -o /dev/null http://{addr}/berth.v1.Packages/Update 2>&1 | tr -d '\\r')\n\
               status=$(printf '%s\\n' \"$answer\" | sed -n 's/^grpc-status: *//p' | head -1)\n\
               [ -n \"$status\" ] && break\n\
             done\n\
             message=$(printf '%s\\n' \"$answer\" | sed -n 's/^grpc-message: *//p' | head -1)\n\
             jq -n --arg read \"$read\" --arg status \"$status\" --arg message \"$message\" --arg answer \"$answer\" \
               '[{{op:\"add\",path:\"/probe\",value:{{read:$read,status:$status,message:$message,answer:$answer}}}}]' > \"$VALUES_JSON_PATCH_PATH\"\n",
            token = data.join("token").display(),
            addr = up.proc.addr.as_deref().context("berth up's address")?,
        );
        write_package(
            repo_dir.path(),
            "intruder",
            "Application",
            &[("probe.sh", hook)],
            &[("update.bin", &frame[..])],
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let accepted = client
            .update(update(&module, Some(json!({"round": 1}))))
            .await?
            .into_inner();
        let before = journey::wait_running(&mut client, &module, accepted.generation).await?;
        let app = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "intruder".into(),
            namespace: ns.to_string(),
        };
        let accepted = client.update(update(&app, None)).await?.into_inner();
        let probed = journey::follow(&mut client, &app, DEADLINE, "the probe hook's report", |p| {
            Ok(p.observed_generation >= accepted.generation && p.phase == "Running")
        })
        .await?;
        let values = probed
            .values
            .as_ref()
            .map(berth_proto::json::from_struct)
            .unwrap_or(Value::Null);
        let probe = &values["probe"];
        println!("the hook's probe: {probe}");
        let read = probe["read"].as_str().unwrap_or_default();
        ensure!(
            !read.contains("READ") && read.contains("Permission denied"),
            "the hook read berth up's token: {probe}"
        );
        ensure!(
            probe["status"] == "16",
            "the hook's Update was not refused Unauthenticated: {probe}"
        );
        let after = client
            .get(v1::GetRequest {
                r#ref: Some(module.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            after.generation == before.generation && after.settings == before.settings,
            "the Module changed: generation {} -> {}, settings {:?} -> {:?}",
            before.generation,
            after.generation,
            before.settings,
            after.settings
        );
        for r in [&app, &module] {
            client
                .remove(v1::RemoveRequest {
                    r#ref: Some(r.clone()),
                    ..Default::default()
                })
                .await?;
            journey::wait_gone(&mut client, r).await?;
        }
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}
