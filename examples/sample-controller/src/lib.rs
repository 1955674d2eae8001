//! A port of k8s.io/sample-controller on kcache (in progress).
