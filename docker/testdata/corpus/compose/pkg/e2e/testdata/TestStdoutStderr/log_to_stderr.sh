>&2 echo "log to stderr"
echo "log to stdout"

