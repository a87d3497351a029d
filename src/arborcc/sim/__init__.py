"""Predicting an algorithm's time on a topology (bandwidth model today)."""
