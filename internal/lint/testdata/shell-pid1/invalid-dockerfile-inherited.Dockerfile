# The final stage inherits the shell-form CMD of the stage it builds on.
FROM python:3.13-slim AS app
CMD python server.py

FROM app
# closingtime ignore=some-other-rule
LABEL team=ocr
