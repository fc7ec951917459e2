package dev.wirelint.junit5;

import com.github.dockerjava.api.command.InspectContainerResponse;
import com.github.dockerjava.api.exception.NotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Properties;
import java.util.function.Supplier;
import org.testcontainers.containers.GenericContainer;
import org.testcontainers.containers.wait.strategy.Wait;
import org.testcontainers.utility.DockerImageName;
import org.testcontainers.utility.MountableFile;

/**
 * wirelint as a Testcontainers container, beside the test's database
 * container: the {@code wirelint} image, in front of an upstream URI.
 *
 * <p>The container shares the host's network ({@code --network host}), so
 * the upstream URI is the one the test has (a database container's
 * {@code mongodb://127.0.0.1:PORT/}, or any other server the host reaches),
 * and wirelint listens on two free loopback ports picked on the host: one
 * for the application ({@link #getConnectionString()}), one for its admin
 * endpoints ({@link #getAdminAddress()}, where the running test is told and
 * the live report read). That needs a Docker engine on the test's own
 * machine (Linux).
 *
 * <pre>{@code
 * @Container static final WirelintContainer wirelint =
 *     new WirelintContainer().withUpstream(() -> "mongodb://127.0.0.1:" + PORT + "/").dependsOn(database);
 *
 * @DynamicPropertySource
 * static void mongo(DynamicPropertyRegistry registry) {
 *   registry.add("spring.mongodb.uri", wirelint::getConnectionString);
 * }
 * }</pre>
 *
 * <p>{@link #stop()} stops wirelint with SIGTERM ({@code docker stop}): it
 * finishes the requests in flight and writes its final report, which is
 * copied out of the container to {@link #getReport()} before the container
 * is removed. Nothing of it is left behind, with or without Testcontainers'
 * Ryuk.
 *
 * <p>With the JUnit extension, {@code wirelint.container=true} runs the
 * run's wirelint in one of these instead of a process ({@link Wirelint#uri(String)}
 * and {@code wirelint.upstream} as usual), and the extension prints the
 * report, writes SARIF and JUnit XML, and fails the run on {@code
 * wirelint.failOn}, naming the tests, as it does for the process.
 */
public class WirelintContainer extends GenericContainer<WirelintContainer> {
  /** The image of the wirelint this jar is: {@code wirelint:VERSION}. */
  public static final String DEFAULT_IMAGE = "wirelint:" + version();

  /** Where wirelint writes its report in the container (the image's working directory is its own). */
  static final String REPORT_IN_CONTAINER = "/var/lib/wirelint/report.json";

  private static final String CONFIG_IN_CONTAINER = "/etc/wirelint/wirelint.toml";
  private static final int STOP_TIMEOUT_SECONDS = 30;

  private final String image;
  private Supplier<String> upstream;
  private Path config;
  private boolean showValues;
  private Path report;
  private final StringBuffer log = new StringBuffer();
  private String startedUpstream;
  private int port;
  private int adminPort;
  private Integer exitCode;
  private String stopProblem;
  private Thread remover;

  /** The image {@link #DEFAULT_IMAGE}. */
  public WirelintContainer() {
    this(DockerImageName.parse(DEFAULT_IMAGE));
  }

  /** Another image of wirelint, e.g. {@code registry.example.com/wirelint:0.1.0}. */
  public WirelintContainer(String image) {
    this(DockerImageName.parse(image));
  }

  public WirelintContainer(DockerImageName image) {
    super(image);
    this.image = image.asCanonicalNameString();
    withNetworkMode("host");
    withLogConsumer(frame -> log.append(frame.getUtf8String()));
    waitingFor(
        Wait.forLogMessage("(?s).*connect your application to mongodb://.*", 1)
            .withStartupTimeout(Duration.ofSeconds(60)));
  }

  /** The database to run in front of: a {@code mongodb://} or {@code mongodb+srv://} URI. */
  public WirelintContainer withUpstream(String uri) {
    Objects.requireNonNull(uri, "uri");
    return withUpstream(() -> uri);
  }

  /**
   * The database to run in front of, asked for when the container starts:
   * for a database container whose URI is known only once it runs (with
   * {@link #dependsOn}).
   */
  public WirelintContainer withUpstream(Supplier<String> uri) {
    upstream = Objects.requireNonNull(uri, "uri");
    return this;
  }

  /** A {@code wirelint.toml} on the host (partition keys, rule thresholds), copied into the container. */
  public WirelintContainer withConfig(Path file) {
    config = file.toAbsolutePath();
    return this;
  }

  /** Let findings carry example values from the traffic ({@code --show-values}). */
  public WirelintContainer withShowValues(boolean show) {
    showValues = show;
    return this;
  }

  /**
   * Where {@link #stop()} puts wirelint's final JSON report on the host
   * (by default a temporary file).
   */
  public WirelintContainer withReport(Path file) {
    report = file.toAbsolutePath();
    return this;
  }

  @Override
  protected void doStart() {
    DockerImageName name = DockerImageName.parse(image);
    if (name.getRegistry().isEmpty() && name.getRepository().equals("wirelint")) {
      // A local build (scripts/image.sh): no registry has it, and a pull
      // would only retry for minutes.
      try {
        getDockerClient().inspectImageCmd(image).exec();
      } catch (NotFoundException e) {
        throw new IllegalStateException(
            "wirelint: the image "
                + image
                + " is not on this Docker engine, and no registry has it: build it (scripts/image.sh in wirelint's"
                + " repository), or name an image a registry has");
      }
    }
    super.doStart();
  }

  @Override
  protected void configure() {
    if (upstream == null) {
      throw new IllegalStateException("wirelint: WirelintContainer needs an upstream: withUpstream(uri)");
    }
    startedUpstream = upstream.get();
    if (startedUpstream == null || startedUpstream.isBlank()) {
      throw new IllegalStateException("wirelint: WirelintContainer's upstream is empty");
    }
    ClientUri.of(startedUpstream, "127.0.0.1:1"); // an error now, not a container that exits
    port = freePort();
    adminPort = freePort();
    log.setLength(0);
    exitCode = null;
    stopProblem = null;
    // Loopback addresses: the admin endpoints need no token there.
    withEnv("WIRELINT_LISTEN", "127.0.0.1:" + port);
    withEnv("WIRELINT_ADMIN", "127.0.0.1:" + adminPort);
    if (!getEnvMap().containsKey("RUST_LOG")) {
      withEnv("RUST_LOG", "wirelint=info,warn");
    }
    List<String> command =
        new ArrayList<>(
            List.of("proxy", "--upstream", startedUpstream, "--report", REPORT_IN_CONTAINER, "--report-interval", "5s"));
    if (config != null) {
      withCopyFileToContainer(MountableFile.forHostPath(config, 0644), CONFIG_IN_CONTAINER);
      command.add("--config");
      command.add(CONFIG_IN_CONTAINER);
    }
    if (showValues) {
      command.add("--show-values");
    }
    withCommand(command.toArray(new String[0]));
  }

  @Override
  protected void containerIsStarted(InspectContainerResponse info) {
    // Without Ryuk nothing else removes it should the JVM end before stop().
    String id = getContainerId();
    remover =
        new Thread(
            () -> {
              try {
                getDockerClient().removeContainerCmd(id).withForce(true).withRemoveVolumes(true).exec();
              } catch (RuntimeException e) {
                // Gone already.
              }
            },
            "wirelint-container-remove");
    Runtime.getRuntime().addShutdownHook(remover);
  }

  /**
   * Before Testcontainers removes the container: {@code docker stop} (SIGTERM,
   * then up to 30 s for wirelint to drain and write its final report), then
   * the report copied out.
   */
  @Override
  protected void containerIsStopping(InspectContainerResponse info) {
    String id = getContainerId();
    try {
      // What an earlier run left must not pass for this one's report.
      Files.deleteIfExists(getReport());
      try {
        getDockerClient().stopContainerCmd(id).withTimeout(STOP_TIMEOUT_SECONDS).exec();
      } catch (RuntimeException e) {
        // Not running (it exited by itself): what it left is still there.
      }
      Long code = getDockerClient().inspectContainerCmd(id).exec().getState().getExitCodeLong();
      exitCode = code == null ? null : code.intValue();
      Path to = getReport();
      if (to.getParent() != null) {
        Files.createDirectories(to.getParent());
      }
      copyFileFromContainer(
          REPORT_IN_CONTAINER,
          (InputStream in) -> Files.copy(in, to, StandardCopyOption.REPLACE_EXISTING));
    } catch (IOException | RuntimeException e) {
      stopProblem = "its report could not be copied out of the container: " + e.getMessage();
    } finally {
      if (remover != null) {
        try {
          Runtime.getRuntime().removeShutdownHook(remover);
        } catch (IllegalStateException e) {
          // The JVM is shutting down: the hook runs anyway.
        }
        remover = null;
      }
    }
  }

  /**
   * The connection string the application uses instead of the upstream's:
   * the same credentials, database and options, on wirelint's address, less
   * what only concerns the way to the database (TLS, {@code replicaSet},
   * SRV, {@code directConnection}).
   */
  public String getConnectionString() {
    requireStarted();
    return ClientUri.of(startedUpstream, getAddress());
  }

  /** Where wirelint listens for the application: {@code 127.0.0.1:PORT}. */
  public String getAddress() {
    requireStarted();
    return "127.0.0.1:" + port;
  }

  /** wirelint's admin endpoints ({@code /healthz}, {@code /report}, {@code /tests}): {@code 127.0.0.1:PORT}. */
  public String getAdminAddress() {
    requireStarted();
    return "127.0.0.1:" + adminPort;
  }

  /** The upstream it runs in front of, once started. */
  public String getUpstream() {
    return startedUpstream;
  }

  /**
   * The host file that holds wirelint's final JSON report once the
   * container is stopped (it does not exist before, or when wirelint wrote
   * none: see {@link #getOutput()}).
   */
  public Path getReport() {
    if (report == null) {
      try {
        Path dir = Files.createTempDirectory("wirelint-container-");
        report = dir.resolve("report.json");
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
    return report;
  }

  /** wirelint's exit status once stopped ({@code 0}: it stopped as asked), else null. */
  public Integer getExitCode() {
    return exitCode;
  }

  /** What wirelint printed (stdout and stderr), kept after the container is removed. */
  public String getOutput() {
    return log.toString();
  }

  /** Why stopping lost the report, or null. */
  String stopProblem() {
    return stopProblem;
  }

  private void requireStarted() {
    if (startedUpstream == null || port == 0) {
      throw new IllegalStateException("wirelint: the WirelintContainer has not been started");
    }
  }

  /** A port nothing listens on now, on the host's loopback. */
  static int freePort() {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException("wirelint: no free port on 127.0.0.1", e);
    }
  }

  private static String version() {
    Properties p = new Properties();
    try (InputStream in = WirelintContainer.class.getResourceAsStream("version.properties")) {
      if (in != null) {
        p.load(in);
      }
    } catch (IOException e) {
      // The fallback below.
    }
    String v = p.getProperty("version", "");
    return v.isEmpty() || v.startsWith("${") ? "latest" : v;
  }
}
