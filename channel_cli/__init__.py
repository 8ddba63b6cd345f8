"""`channel`, the command line: the chat app (channel_tui) and the tools (engine) under one
command. It sits above both, so that the engine never imports the front end."""
