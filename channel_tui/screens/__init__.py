"""Screens: the chat, and the modal help, session list, new session, boot comparison and
quitting screens."""
