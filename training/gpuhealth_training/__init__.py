"""gpuhealth for training loops (placeholder until the training issue lands)."""
