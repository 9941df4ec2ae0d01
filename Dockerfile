# closingtime's container image: the lab server (`closingtime serve`, the
# default command) and the load pod (`closingtime load …`) of real-cluster
# runs. A static binary on distroless, as a non-root user, with an exec-form
# ENTRYPOINT so that closingtime itself is PID 1 and receives SIGTERM.
# `docker build -t closingtime:dev .` makes the tag that --image defaults to
# (docs/kube.md shows the kind workflow: kind load docker-image).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/closingtime ./cmd/closingtime

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/closingtime /closingtime
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/closingtime"]
CMD ["serve"]
