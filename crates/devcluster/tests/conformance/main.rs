//! Conformance tests: assertions that hold against kube-apiserver and the dev cluster
//! alike. Run against a real cluster with `BERTH_TEST_KUBECONFIG=<path>`.

mod apply;
mod auth;
mod common;
mod crd;
mod crud;
mod devonly;
mod differential;
mod discovery;
mod helm;
mod kubectl;
mod namespaces;
mod podsecurity;
mod scale;
mod tools;
mod watch;
