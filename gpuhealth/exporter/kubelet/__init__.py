"""What the kubelet knows about this node's pods: which pod holds which GPU (its pod-resources API)."""
