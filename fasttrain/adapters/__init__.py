"""Adapters to other RL libraries (optional extras: gym, sb3, pettingzoo)."""
