"""Deployment artefacts: the Helm chart, the plain manifests, the Dockerfile, the Grafana dashboard
and the alerting rules, checked with the real Helm engine, Kubernetes schemas and Prometheus."""
