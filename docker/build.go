package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/convergekit/converge"
)

// LabelBuildKey holds, on an image the package built, the digest of its
// build context and options (see Build): an image whose key matches the
// one computed now is not built again.
const LabelBuildKey = "io.convergekit.build-key"

// Build builds a container's image from a local context through the
// engine's build API instead of pulling it (Compose build:). The image is
// tagged ContainerSpec.Image.
type Build struct {
	// Context is the directory sent to the engine, a path on this host,
	// or a remote context the engine fetches itself (the build
	// endpoint's remote parameter): a Git repository
	// ("https://host/repo.git#ref:dir", "git://...", "git@host:repo.git",
	// "github.com/owner/repo"), which needs git on the engine's host, or
	// the URL of a tar archive (http or https) or of a Dockerfile alone;
	// required. A local context's .dockerignore is honoured.
	//
	// A remote context is built again only when its URL or the other
	// options change: what the URL serves is not read by this process, so
	// a new commit on a branch, or a new archive at the same URL, is not
	// seen. Name a tag, a commit or a versioned archive to update it.
	// A password or token in the URL is redacted from errors.
	Context string `json:"context,omitzero"`
	// Dockerfile is the path of the Dockerfile inside Context; ""
	// means "Dockerfile".
	Dockerfile string `json:"dockerfile,omitzero"`
	// Args are the build arguments (ARG). An argument whose name is
	// secret (IsSecretEnv) is redacted from errors.
	Args map[string]string `json:"args,omitempty"`
	// Target is the stage of a multi-stage Dockerfile to build; "" builds
	// the last one.
	Target string `json:"target,omitzero"`
	// Labels are put on the image, with LabelOwner and LabelBuildKey.
	Labels map[string]string `json:"labels,omitempty"`
	// ExtraHosts adds "host:ip" lines to /etc/hosts during the build.
	ExtraHosts []string `json:"extra_hosts,omitempty"`
	// ShmSize is the size of /dev/shm of the build's containers, in
	// bytes; 0 keeps the engine's default.
	ShmSize int64 `json:"shm_size,omitzero"`
	// DockerfileInline is the Dockerfile itself (Compose
	// dockerfile_inline), sent with the context under a name of its own;
	// it excludes Dockerfile.
	DockerfileInline string `json:"dockerfile_inline,omitzero"`
	// Tags are more names the built image gets, besides
	// ContainerSpec.Image (Compose build.tags). Removing the image removes
	// ContainerSpec.Image's name only.
	Tags []string `json:"tags,omitempty"`
	// Platform is the platform the image is built for ("linux/arm64",
	// the build endpoint's platform parameter); "" builds for the
	// engine's. One platform only: a multi-platform image needs buildx.
	Platform string `json:"platform,omitzero"`
}

// inlineDockerfile is the name under which a DockerfileInline is sent in
// the build context; a file of that name in the context is not sent.
const inlineDockerfile = ".converge-dockerfile-inline"

// ImageBuilder is the ability to build an image, which *client.Client
// has. The Engine of a project that builds images must have it; an engine
// without it fails the build with ErrCannotBuild.
type ImageBuilder interface {
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
}

// ErrCannotBuild means a project builds an image but its Engine has no
// ImageBuild method (see ImageBuilder).
var ErrCannotBuild = errors.New("the engine cannot build images")

// ErrBuildFailed is matched by the error of a build that failed; its
// *ImageError carries the tail of the build output.
var ErrBuildFailed = errors.New("build failed")

// validate returns the field and reason of an invalid build, or "", "".
func (b *Build) validate() (string, string) {
	switch {
	case b.Context == "":
		return "Build.Context", "is required"
	case b.remote() && !remoteContext(b.Context):
		return "Build.Context", fmt.Sprintf("%q is neither a local directory nor a remote context the engine fetches (http, https or git URL)", redactURLs(b.Context))
	case b.remote() && b.DockerfileInline != "":
		return "Build.DockerfileInline", "needs a local context (the engine fetches a remote one itself)"
	case b.Dockerfile != "" && (path.IsAbs(filepath.ToSlash(b.Dockerfile)) || !filepath.IsLocal(b.Dockerfile)):
		return "Build.Dockerfile", fmt.Sprintf("%q is not a path inside the context", b.Dockerfile)
	case strings.Contains(b.Platform, ","):
		return "Build.Platform", fmt.Sprintf("%q names more than one platform: a multi-platform image needs buildx (BuildKit), which the engine's classic build endpoint is not", b.Platform)
	case b.ShmSize < 0:
		return "Build.ShmSize", "must not be negative"
	case b.Dockerfile != "" && b.DockerfileInline != "":
		return "Build.DockerfileInline", "excludes Build.Dockerfile: set one of them"
	}
	for i, t := range b.Tags {
		if t == "" || strings.ContainsAny(t, " \t\n") {
			return fmt.Sprintf("Build.Tags[%d]", i), fmt.Sprintf("%q is not an image name", t)
		}
	}
	for i, h := range b.ExtraHosts {
		if name, _, ok := strings.Cut(h, ":"); !ok || name == "" {
			return fmt.Sprintf("Build.ExtraHosts[%d]", i), fmt.Sprintf("%q is not host:IP", h)
		}
	}
	return "", ""
}

// remote reports whether Context names a remote context rather than a
// directory.
func (b *Build) remote() bool {
	return strings.Contains(b.Context, "://") || strings.HasPrefix(b.Context, "git@") || strings.HasPrefix(b.Context, "github.com/")
}

// remoteContext reports whether c is a remote context the engine's build
// endpoint fetches: an http or https URL (a Git repository, a tar archive
// or a Dockerfile), a git:// URL, git@host:path or github.com/path.
func remoteContext(c string) bool {
	if strings.HasPrefix(c, "git@") {
		host, repo, ok := strings.Cut(strings.TrimPrefix(c, "git@"), ":")
		return ok && host != "" && repo != ""
	}
	if strings.HasPrefix(c, "github.com/") {
		return len(c) > len("github.com/")
	}
	u, err := url.Parse(c)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "http", "https", "git":
		return true
	}
	return false
}

func (b *Build) dockerfile() string {
	if b.DockerfileInline != "" {
		return inlineDockerfile
	}
	if b.Dockerfile == "" {
		return "Dockerfile"
	}
	return filepath.ToSlash(b.Dockerfile)
}

// contextTar returns the build context as a tar stream, without the files
// .dockerignore excludes (the Dockerfile and .dockerignore are always
// sent), and the build key: a SHA-256 of the stream and of the build
// options. Headers carry no times, owners or users, so the key depends on
// names, modes, link targets and contents only.
//
// A remote context sends no tar stream (nil): the engine fetches it, and
// the key covers its URL and the options.
func (b *Build) contextTar() ([]byte, string, error) {
	if b.remote() {
		h := sha256.New()
		h.Write([]byte("remote\x00" + b.Context + "\x00"))
		h.Write(b.optionsJSON())
		return nil, "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
	}
	root, err := os.OpenRoot(b.Context)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	var excludes []string
	if f, err := root.Open(".dockerignore"); err == nil {
		excludes, err = ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf(".dockerignore: %w", err)
		}
	}
	pm, err := patternmatcher.New(excludes)
	if err != nil {
		return nil, "", fmt.Errorf(".dockerignore: %w", err)
	}
	keep := map[string]bool{b.dockerfile(): true, ".dockerignore": true}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." || name == inlineDockerfile && b.DockerfileInline != "" {
			return nil
		}
		if !keep[name] {
			skip, err := pm.MatchesOrParentMatches(name)
			if err != nil {
				return err
			}
			if skip {
				if d.IsDir() && !pm.Exclusions() {
					return fs.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if b.DockerfileInline != "" {
		hdr := &tar.Header{Name: inlineDockerfile, Mode: 0o644, Size: int64(len(b.DockerfileInline)),
			Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", err
		}
		if _, err := io.WriteString(tw, b.DockerfileInline); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	h := sha256.New()
	h.Write(buf.Bytes())
	h.Write(b.optionsJSON())
	return buf.Bytes(), "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// optionsJSON is the part of the build key that the build options make.
func (b *Build) optionsJSON() []byte {
	opts, _ := json.Marshal(struct {
		Dockerfile, Target string
		Args, Labels       map[string]string
		ExtraHosts, Tags   []string
		ShmSize            int64
		Platform           string `json:",omitempty"`
	}{b.dockerfile(), b.Target, b.Args, b.Labels, b.ExtraHosts, b.Tags, b.ShmSize, b.Platform})
	return opts
}

// redactor returns what scrubs the values of secret build arguments (and
// URL passwords) from build output.
func (b *Build) redactor() redactor {
	var r redactor
	for k, v := range b.Args {
		if v != "" && IsSecretEnv(k, nil) {
			r = append(r, v)
		}
	}
	slices.SortFunc(r, func(a, b string) int { return len(b) - len(a) })
	return r
}

// BuildID is the ID of the item that builds the image ref; it is the
// ImageID of ref, so the containers on it depend on the build as they
// would on a pull.
func BuildID(ref string) converge.ID { return ImageID(ref) }

// builtImage is the item of an image built from a context: Present builds
// it when it is missing or its LabelBuildKey differs from the key of the
// context and options now; Absent removes it (with the project's images,
// when RemoveImages is set). Its state is an ImageState, so the containers
// on it are recreated when a build gives a new image ID.
type builtImage struct {
	ref      string
	spec     Build
	eng      Engine
	project  converge.ID
	keep     bool
	services []string
	size     uint64 // the largest ContainerSpec.ImageSize of its services
	space    *space
}

func (bi *builtImage) ID() converge.ID { return BuildID(bi.ref) }

func (bi *builtImage) key() string { return "image:" + bi.ref }

// StateCurrent reads the image from the project's snapshot (one list for
// every image of the project), or lists it.
func (bi *builtImage) StateCurrent(ctx context.Context, deps converge.DepStates) (ImageState, error) {
	if ps, err := converge.DepState[ProjectState](deps, bi.project); err == nil && ps.snap.usable(bi.key()) {
		li, ok := ps.snap.images[bi.ref]
		return ImageState{Ref: bi.ref, Present: ok, ID: li.ID, buildKey: li.buildKey, snap: ps.snap}, nil
	}
	found, err := listImages(ctx, bi.eng, []string{bi.ref})
	if err != nil {
		return ImageState{}, err
	}
	li, ok := found[bi.ref]
	return ImageState{Ref: bi.ref, Present: ok, ID: li.ID, buildKey: li.buildKey}, nil
}

// StateGoal is the image present with the key of the context as it is now.
func (bi *builtImage) StateGoal(context.Context, converge.DepStates) (ImageState, error) {
	_, key, err := bi.spec.contextTar()
	if err != nil {
		return ImageState{}, &ImageError{Ref: bi.ref, Services: bi.services, Err: fmt.Errorf("build context %s: %w", redactURLs(bi.spec.Context), err)}
	}
	return ImageState{Ref: bi.ref, Present: true, buildKey: key}, nil
}

// StateClean is the image removed, or left alone unless the project
// removes its images.
func (bi *builtImage) StateClean(context.Context, converge.DepStates) (ImageState, error) {
	return ImageState{Ref: bi.ref, keep: bi.keep}, nil
}

// Check requires a build when the image is missing or was built from
// another context or options, and a removal when it should be absent.
func (bi *builtImage) Check(_ context.Context, current, target ImageState) (converge.Decision, error) {
	switch {
	case target.keep, current.Present == target.Present && (!target.Present || current.buildKey == target.buildKey):
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

// Apply builds the image (tagged ref, labelled with its build key) or
// removes it. With an ImageSize among its services, the free space of the
// engine's data root is checked first: too little is a *SpaceError, with
// nothing built. A failed build is an *ImageError matching ErrBuildFailed,
// with the last lines of the build output, secret build arguments
// redacted.
func (bi *builtImage) Apply(ctx context.Context, current, target ImageState) (ImageState, error) {
	current.snap.invalidate(bi.key())
	if !target.Present {
		im := &Image{Ref: bi.ref, eng: bi.eng}
		return im.Apply(ctx, current, target)
	}
	if bi.size > 0 {
		root, free, ok, err := bi.space.read(ctx)
		if err != nil {
			return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: err}
		}
		if ok && free < bi.size {
			return current, &SpaceError{Ref: bi.ref, Services: bi.services, Root: root, Need: bi.size, Free: free}
		}
	}
	builder, ok := bi.eng.(ImageBuilder)
	if !ok {
		return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: ErrCannotBuild}
	}
	tarball, key, err := bi.spec.contextTar()
	if err != nil {
		return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: fmt.Errorf("build context %s: %w", redactURLs(bi.spec.Context), err)}
	}
	labels := maps.Clone(bi.spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelOwner] = OwnerValue
	labels[LabelBuildKey] = key
	args := map[string]*string{}
	for k, v := range bi.spec.Args {
		args[k] = &v
	}
	opts := build.ImageBuildOptions{
		Tags: append([]string{bi.ref}, bi.spec.Tags...), Dockerfile: bi.spec.dockerfile(), BuildArgs: args, Target: bi.spec.Target,
		Labels: labels, ExtraHosts: bi.spec.ExtraHosts, ShmSize: bi.spec.ShmSize, Remove: true, ForceRemove: true,
		Platform: bi.spec.Platform,
	}
	var body io.Reader = bytes.NewReader(tarball)
	if bi.spec.remote() {
		// The engine fetches the context (the remote parameter); the
		// Dockerfile is a path inside it.
		opts.RemoteContext, body = bi.spec.Context, nil
	}
	resp, err := builder.ImageBuild(ctx, body, opts)
	red := bi.spec.redactor()
	if errors.Is(err, ErrCannotBuild) {
		return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: ErrCannotBuild}
	}
	if err != nil {
		return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: &causeError{msg: "build: " + red.string(err.Error()), err: ErrBuildFailed}}
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: fmt.Errorf("build: %w", err)}
		}
		out.WriteString(m.Stream)
		if m.Error != nil {
			out.WriteString(m.Error.Message + "\n")
			return current, &ImageError{Ref: bi.ref, Services: bi.services,
				Err: &causeError{msg: withLog("build failed", red.string(tail(out.String()))), err: ErrBuildFailed}}
		}
	}
	found, err := listImages(ctx, bi.eng, []string{bi.ref})
	if err != nil {
		return current, &ImageError{Ref: bi.ref, Services: bi.services, Err: err}
	}
	li := found[bi.ref]
	return ImageState{Ref: bi.ref, Present: li.ID != "", ID: li.ID, buildKey: li.buildKey}, nil
}

// ApplyDry returns the image as a build would leave it, building nothing:
// the report of a dry run shows the build as required.
func (bi *builtImage) ApplyDry(_ context.Context, current, target ImageState) (ImageState, error) {
	if target.keep {
		return current, nil
	}
	return target, nil
}

// tail returns the last LogTailLines lines of out, at most LogTailBytes.
func tail(out string) string {
	out = strings.TrimRight(out, "\n")
	lines := strings.Split(out, "\n")
	if len(lines) > LogTailLines {
		lines = lines[len(lines)-LogTailLines:]
	}
	s := strings.Join(lines, "\n")
	if len(s) > LogTailBytes {
		s = s[len(s)-LogTailBytes:]
	}
	return s
}
