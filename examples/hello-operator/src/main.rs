//! `hello-operator`: runs the operator against the cluster of the
//! kubeconfig (or the Pod's ServiceAccount); `hello-operator crd` prints
//! the CRD (`hello-operator crd | kubectl apply -f -`).

use hello_operator::{Settings, crd_yaml, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        print!("{}", crd_yaml()?);
        return Ok(());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| kcache::controller::log_filter("info").into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let client = kube::Client::try_default().await?;
    run(client, Settings::from_env()?, std::future::pending()).await
}
