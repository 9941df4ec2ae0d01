# escape=`
# The exec-form ENTRYPOINT runs a script with sh -c, without exec;
# the continuation lines and the here-document must not confuse the parser.
FROM python:3.13-slim AS base
RUN <<EOF
pip install --no-cache-dir grpcio
CMD ["python", "inside-heredoc.py"]
EOF
ENTRYPOINT ["/bin/sh", "-c", `
    "python migrate.py && python server.py"]
