"""Activation functions and their backward ops."""
