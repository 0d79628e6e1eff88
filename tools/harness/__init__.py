"""The reference server and the client daemon as child processes, for the tools and the tests."""
