//! Operations on the running cluster: test namespaces, CRDs, and etcd's
//! revision and compaction.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::ControlPlane;
use crate::error::EnvtestError;
use crate::raw_http;

impl ControlPlane {
    /// Creates a namespace named `<prefix>-<random suffix>` and returns its name.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String, EnvtestError> {
        let client = self.client()?;
        let suffix: u32 = rand::random();
        let name = format!("{prefix}-{suffix:08x}");
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name }
        }))
        .map_err(|e| EnvtestError::State(format!("namespace object: {e}")))?;
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| EnvtestError::api(format!("creating namespace {name}"), e))?;
        Ok(name)
    }

    /// Applies each CRD (server-side apply) and waits until it is Established
    /// and its resource is served (discovery lists it).
    pub async fn install_crds(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(), EnvtestError> {
        let client = self.client()?;
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        let pp = PatchParams::apply("kcache-envtest").force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &pp, &Patch::Apply(crd))
                .await
                .map_err(|e| EnvtestError::api(format!("applying CRD {name}"), e))?;
        }
        let timeout = Duration::from_secs(60);
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let started = Instant::now();
            loop {
                let current = api
                    .get(&name)
                    .await
                    .map_err(|e| EnvtestError::api(format!("reading CRD {name}"), e))?;
                let established = current
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                let served = if established {
                    let group = &crd.spec.group;
                    let plural = &crd.spec.names.plural;
                    let mut all = true;
                    for v in crd.spec.versions.iter().filter(|v| v.served) {
                        let listed = client
                            .list_api_group_resources(&format!("{group}/{}", v.name))
                            .await
                            .map(|l| l.resources.iter().any(|r| &r.name == plural))
                            .unwrap_or(false);
                        all &= listed;
                    }
                    all
                } else {
                    false
                };
                if established && served {
                    break;
                }
                if started.elapsed() > timeout {
                    return Err(EnvtestError::CrdNotEstablished {
                        name,
                        waited: started.elapsed(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The current etcd revision.
    pub(crate) async fn etcd_revision(&self) -> Result<i64, EnvtestError> {
        self.local_binaries("etcd_revision")?;
        // Range over an empty key: the response header carries the revision.
        let body = raw_http::post(self.etcd_port, "/v3/kv/range", r#"{"key":"AA=="}"#)
            .await
            .map_err(|e| EnvtestError::State(format!("etcd range request failed: {e}")))?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| EnvtestError::State(format!("etcd range answer {body:?}: {e}")))?;
        v.pointer("/header/revision")
            .and_then(|r| r.as_str().and_then(|s| s.parse().ok()).or(r.as_i64()))
            .ok_or_else(|| {
                EnvtestError::State(format!("etcd range answer without revision: {body}"))
            })
    }

    /// Compacts etcd up to its current revision, so that a watch from any
    /// older resourceVersion is answered `410 Gone` (once the apiserver's
    /// watch cache no longer holds it). Returns the compacted revision.
    pub async fn compact_etcd(&self) -> Result<i64, EnvtestError> {
        let rev = self.etcd_revision().await?;
        let body = format!(r#"{{"revision":"{rev}","physical":true}}"#);
        raw_http::post(self.etcd_port, "/v3/kv/compaction", &body)
            .await
            .map_err(|e| EnvtestError::State(format!("etcd compaction failed: {e}")))?;
        Ok(rev)
    }
}
