@echo off
rem Starts the Ferry gateway (`ferry serve`) in a console window of its own, minimized, and
rem returns. Closing that window, Ctrl-C in it or `ferry stop` stops the gateway (it first
rem drains the writes in flight). README.txt says how to run this at every login.
rem ferry.exe is looked for beside this file, then where README.txt installs it.
setlocal
set "FERRY=%~dp0ferry.exe"
if not exist "%FERRY%" set "FERRY=%LOCALAPPDATA%\Programs\ferry\ferry.exe"
if not exist "%FERRY%" (
    echo ferry-at-login: no ferry.exe beside this file nor in %LOCALAPPDATA%\Programs\ferry 1>&2
    exit /b 1
)
start "Ferry gateway" /min "%FERRY%" serve
