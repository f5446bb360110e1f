"""The server process: preparation (`server`), one worker (`worker`), the supervisor of N forked
workers (`supervisor`), the registry migrations runner (`migrate`) and the one-line report of
what keeps a configuration from serving (`fatal`). Beside `gateway.web`, never imported by it."""
