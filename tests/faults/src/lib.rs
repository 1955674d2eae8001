//! kcache's fault suite (issue 9). Everything lives under `tests/`:
//! informers run against a real local control plane (kcache-envtest)
//! behind a fault-injecting TCP proxy ([`kcache_envtest::proxy`]) and a
//! client layer that answers 429/500, while a seeded driver creates,
//! updates and deletes ConfigMaps. See `docs/reliability.md`.
