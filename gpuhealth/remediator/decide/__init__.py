"""What to do about each node, with no API client: node state, node views, the disruption budget, the
ladder and the reasons of its Events."""
