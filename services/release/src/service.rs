//! service
#[derive(Clone)]
pub struct ReleaseService {
    client: kube::Client,
}
impl ReleaseService {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}
