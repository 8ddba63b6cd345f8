"""Compute backends: the Backend protocol (base.py), numpy and Vulkan implementations."""
