"""Snapshots of a conversation's state: the file format, the writer, restore and inspect."""
