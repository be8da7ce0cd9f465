module github.com/runnel-dev/runnel

go 1.26.8
