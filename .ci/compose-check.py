#!/usr/bin/env python3
"""Checks what docker-compose.yml promises beyond the Compose schema (which .ci/run checks
first with check-jsonschema's copy of the compose-spec schema): what `docker compose config`
would refuse (references to undefined services, volumes and secrets, missing bind-mounted
files of the repository) and berth's own rules for the file (issue 17):

- the kubeconfig is mounted where every service that reads it (BERTH_KUBECONFIG) looks;
- every service has a healthcheck, and `depends_on: service_healthy` waits on one;
- the gateway requires a token and is the only published service, on 127.0.0.1;
- every stateful service keeps its state in PostgreSQL;
- release is given the key its release records are authenticated with, from a secret.

Usage: compose-check.py FILE. Exits 1 naming every broken rule. Needs ruamel.yaml (installed
with check-jsonschema).
"""

import os
import sys

from ruamel.yaml import YAML

# Services that need no healthcheck: Jaeger's image has no shell or client to run one, and
# nothing waits on it (a service whose trace exporter cannot reach it keeps running).
NO_HEALTHCHECK = {"jaeger"}
# The berth services that keep state, and the variable naming their database.
STATEFUL = {
    "queue": "BERTH_QUEUE_DATABASE",
    "lifecycle": "BERTH_LIFECYCLE_DATABASE",
    "hookevent": "BERTH_HOOKEVENT_DATABASE",
}
# The commands that talk to the cluster, so need the kubeconfig.
NEEDS_KUBECONFIG = {"berth-hookevent", "berth-release"}
PUBLISHED = "gateway"


def as_dict(value):
    """`environment` and `depends_on` in either of their forms, as a dict."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    out = {}
    for item in value:
        key, _, val = str(item).partition("=")
        out[key] = val
    return out


def mounts(service):
    """(source, target) of each volume entry, short or long form."""
    out = []
    for volume in service.get("volumes", []) or []:
        if isinstance(volume, dict):
            out.append((str(volume.get("source", "")), str(volume.get("target", ""))))
        else:
            parts = str(volume).split(":")
            # A leading ${VAR:-default} contains a colon of its own.
            if parts[0].startswith("${"):
                end = str(volume).index("}") + 1
                source, rest = str(volume)[:end], str(volume)[end + 1 :]
                parts = [source] + rest.split(":")
            out.append((parts[0], parts[1] if len(parts) > 1 else parts[0]))
    return out


def check(path):
    with open(path) as f:
        doc = YAML(typ="safe").load(f)
    root = os.path.dirname(os.path.abspath(path))
    errors = []
    services = doc.get("services") or {}
    volumes = set((doc.get("volumes") or {}).keys())
    secrets = set((doc.get("secrets") or {}).keys())
    if not services:
        errors.append("no services")

    for name, service in services.items():
        env = as_dict(service.get("environment"))
        command = service.get("command") or []
        if isinstance(command, str):
            command = command.split()
        healthy = "healthcheck" in service and not service["healthcheck"].get("disable")

        for dep, spec in as_dict(service.get("depends_on")).items():
            if dep not in services:
                errors.append(f"{name}: depends on undefined service {dep!r}")
                continue
            condition = spec.get("condition") if isinstance(spec, dict) else None
            if condition == "service_healthy" and "healthcheck" not in services[dep]:
                errors.append(f"{name}: waits for {dep} to be healthy, which has no healthcheck")

        for source, target in mounts(service):
            if source.startswith((".", "/", "~", "$")):
                local = source.startswith("./")
                # ./certs is written by `berth certs` on the user's machine.
                if local and not source.startswith("./certs"):
                    if not os.path.exists(os.path.join(root, source)):
                        errors.append(f"{name}: bind mount source {source} does not exist")
            elif source not in volumes:
                errors.append(f"{name}: volume {source!r} is not declared under volumes")
        for secret in service.get("secrets", []) or []:
            secret_name = secret.get("source") if isinstance(secret, dict) else secret
            if secret_name not in secrets:
                errors.append(f"{name}: secret {secret_name!r} is not declared under secrets")

        if not healthy and name not in NO_HEALTHCHECK:
            errors.append(f"{name}: no healthcheck")

        kubeconfig = env.get("BERTH_KUBECONFIG")
        if command and command[0] in NEEDS_KUBECONFIG and not kubeconfig:
            errors.append(f"{name}: {command[0]} needs BERTH_KUBECONFIG")
        if kubeconfig and kubeconfig not in {t for _, t in mounts(service)}:
            errors.append(f"{name}: BERTH_KUBECONFIG={kubeconfig} is not mounted there")

        ports = service.get("ports") or []
        if name != PUBLISHED and ports:
            errors.append(f"{name}: published ({ports}); only {PUBLISHED} may be")
        for port in ports:
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).split(":")[0]
            if isinstance(port, dict) or str(port).count(":") == 2:
                if host_ip != "127.0.0.1":
                    errors.append(f"{name}: port {port} is published beyond 127.0.0.1")
            else:
                errors.append(f"{name}: port {port} is published on every interface")

        if command and command[0] == "berth-release":
            key = env.get("BERTH_RECORD_KEY_FILE", "")
            given = {f"/run/secrets/{s.get('source') if isinstance(s, dict) else s}"
                     for s in service.get("secrets", []) or []}
            if key not in given and "--record-key-file" not in command:
                errors.append(f"{name}: no release record key (BERTH_RECORD_KEY_FILE from a secret)")

        if name in STATEFUL:
            url = env.get(STATEFUL[name], "")
            if not url.startswith("postgres://") and "postgres://" not in " ".join(command):
                errors.append(f"{name}: state not on PostgreSQL ({STATEFUL[name]}={url!r})")

    gateway = services.get(PUBLISHED)
    if gateway is None:
        errors.append(f"no {PUBLISHED} service")
    else:
        env = as_dict(gateway.get("environment"))
        command = gateway.get("command") or []
        if any(a == "--token" or str(a).startswith("--token=") for a in command):
            errors.append(
                f"{PUBLISHED}: a token on the command line (readable by every process); use --token-file"
            )
        if not (
            "--token-file" in command
            or env.get("BERTH_TOKEN")
            or env.get("BERTH_TOKEN_FILE")
        ):
            errors.append(f"{PUBLISHED}: serves the API without a token")
    for name in STATEFUL:
        if name not in services:
            errors.append(f"no {name} service")
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    errors = check(sys.argv[1])
    for error in errors:
        print(f"{sys.argv[1]}: {error}", file=sys.stderr)
    if not errors:
        print(f"{sys.argv[1]}: berth's compose rules hold")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
