"""The Kubernetes controller: API adapter, informer, leader election (and, later, reconcile)."""
