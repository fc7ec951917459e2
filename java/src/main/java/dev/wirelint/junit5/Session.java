package dev.wirelint.junit5;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The wirelint proxy of one test run: started once, in front of one
 * upstream, and stopped when the JUnit engine closes its root store.
 */
// CloseableResource is deprecated from JUnit 5.13 on, where an AutoCloseable
// in the store is closed too; before 5.13 only a CloseableResource is.
@SuppressWarnings("deprecation")
final class Session implements ExtensionContext.Store.CloseableResource, AutoCloseable {
  private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(Session.class);
  private static final Pattern LISTENING = Pattern.compile("connect your application to mongodb://([^/\\s]+)/");
  private static final Pattern ADMIN = Pattern.compile("admin endpoints on http://([^/\\s]+)/");
  private static final Pattern OPERATIONS = Pattern.compile("· (\\d+) operations ·");
  private static final Pattern ERROR = Pattern.compile("\"error\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");
  private static final Pattern FINDINGS = Pattern.compile("· (\\d+) findings?");
  private static final long STARTUP_TIMEOUT_MS = 30_000;
  private static final long STOP_TIMEOUT_MS = 30_000;

  /** The session of the run in progress, for {@link Wirelint}'s static helpers. */
  private static Session current;

  private final Options options;
  private final PrintStream out = System.out;
  private final Map<String, String> previous = new LinkedHashMap<>();
  private Path dir;
  private Path binary;
  /** Why wirelint could not start, when it could not. */
  private String startFailure;
  private boolean extracted;
  private Path report;
  private Path log;
  private Process process;
  /** With wirelint.container=true: the container it runs in, instead of {@link #process}. */
  private Container container;
  private String upstream;
  private String uri;
  /** wirelint's admin endpoints (host:port), where the running test is told. */
  private String admin;
  private HttpClient http;
  /** Why the running test could not be told, once it could not. */
  private volatile String markError;
  private volatile boolean closed;

  private Session(Options options) {
    this.options = options;
  }

  /**
   * The run's wirelint in a container ({@link ContainerProxy}, which needs
   * Testcontainers: reached through this interface, so that a run without
   * {@code wirelint.container} never loads it).
   */
  interface Container {
    /** Where wirelint listens: host:port. */
    String address();

    /** Its admin endpoints: host:port. */
    String admin();

    /** Which container, for the line said when it starts. */
    String describe();

    /** Stops it (SIGTERM: it writes its final report, copied out to the report path) and removes it; its exit status. */
    String stop();

    /** What wirelint printed. */
    String log();
  }

  /** The run's session, made on first use and closed with the engine's root context. */
  static Session of(ExtensionContext context) {
    ExtensionContext root = context.getRoot();
    Session session =
        root.getStore(NAMESPACE)
            .getOrComputeIfAbsent(
                Session.class, k -> new Session(Options.read(root::getConfigurationParameter)), Session.class);
    synchronized (Session.class) {
      current = session;
    }
    return session;
  }

  /** wirelint's URI and the properties pointed at it, while a run's wirelint runs. */
  record Running(String uri, List<String> properties) {}

  /** The run's wirelint, if one runs now (for Spring's context customizer). */
  static synchronized Running running() {
    if (current == null || current.closed || current.uri == null) {
      return null;
    }
    return new Running(current.uri, current.options.repointed());
  }

  /** The run's session, or null when none runs. */
  static synchronized Session currentOrNull() {
    return current == null || current.closed ? null : current;
  }

  static synchronized Session current() {
    if (current == null || current.closed) {
      throw new IllegalStateException(
          "wirelint: no test run with the wirelint extension in progress: annotate the test class with"
              + " @WirelintTest or @ExtendWith(WirelintExtension.class)");
    }
    return current;
  }

  /** Starts wirelint in front of the configured upstream, if there is one. */
  synchronized void startConfigured() {
    if (options.enabled && options.upstream != null) {
      start(options.upstream, options.upstreamSource);
    }
  }

  /** Starts wirelint in front of {@code upstream}, once; returns the URI to use instead. */
  synchronized String start(String upstream, String source) {
    if (!options.enabled) {
      return upstream;
    }
    if (closed) {
      throw new IllegalStateException("wirelint: the run's wirelint has stopped already");
    }
    if (process != null || container != null) {
      if (!this.upstream.equals(upstream)) {
        throw new IllegalStateException(
            "wirelint: one wirelint per test run, already in front of another upstream; start the database once"
                + " for the run (a static container shared by the test classes)");
      }
      return uri;
    }
    try {
      return launch(upstream, source);
    } catch (IllegalStateException e) {
      // Said again at the end of the run, instead of "no database".
      startFailure = e.getMessage();
      throw e;
    }
  }

  private String launch(String upstream, String source) {
    try {
      dir = Files.createTempDirectory("wirelint-");
      binary = binary();
      report = options.report != null ? Paths.get(options.report).toAbsolutePath() : dir.resolve("report.json");
      if (report.getParent() != null) {
        Files.createDirectories(report.getParent());
      }
      log = dir.resolve("wirelint.log");
    } catch (IOException e) {
      throw new IllegalStateException("wirelint: could not start " + binary + ": " + e.getMessage(), e);
    }
    if (options.container) {
      return launchContainer(upstream, source);
    }
    try {
      List<String> command = new ArrayList<>();
      command.add(binary.toString());
      command.add("proxy");
      command.add("--listen");
      command.add("127.0.0.1:0");
      command.add("--upstream");
      command.add(upstream);
      command.add("--report");
      command.add(report.toString());
      command.add("--report-interval");
      command.add("5s");
      if (options.config != null) {
        command.add("--config");
        command.add(Paths.get(options.config).toAbsolutePath().toString());
      }
      if (options.showValues) {
        command.add("--show-values");
      }
      command.add("--admin");
      command.add("127.0.0.1:0");
      ProcessBuilder builder = new ProcessBuilder(command);
      builder.environment().putIfAbsent("RUST_LOG", "wirelint=info,warn");
      // The admin endpoints serve the test markers on loopback: a token set
      // for another wirelint would refuse them.
      builder.environment().remove("WIRELINT_ADMIN_TOKEN");
      builder.redirectErrorStream(true).redirectOutput(log.toFile()).redirectInput(ProcessBuilder.Redirect.PIPE);
      process = builder.start();
      process.getOutputStream().close();
      Process started = process;
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    if (started.isAlive()) {
                      started.destroyForcibly();
                    }
                  },
                  "wirelint-kill"));
    } catch (IOException e) {
      throw new IllegalStateException("wirelint: could not start " + binary + ": " + e.getMessage(), e);
    }
    long deadline = System.currentTimeMillis() + STARTUP_TIMEOUT_MS;
    while (System.currentTimeMillis() < deadline) {
      String written = log();
      Matcher found = LISTENING.matcher(written);
      if (found.find()) {
        Matcher adminAt = ADMIN.matcher(written);
        admin = adminAt.find() ? adminAt.group(1) : null;
        http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
        String down = upstreamProblem();
        if (down != null) {
          process.destroy();
          process = null;
          throw new IllegalStateException(
              "wirelint: the database does not answer through wirelint: " + down + ". No test was run");
        }
        return started(upstream, source, found.group(1), "");
      }
      if (!process.isAlive()) {
        String text = log();
        process = null;
        throw new IllegalStateException("wirelint exited with status " + exitValue() + ":\n" + text);
      }
      sleep(20);
    }
    process.destroyForcibly();
    String text = log();
    process = null;
    throw new IllegalStateException("wirelint did not start listening within 30 s:\n" + text);
  }

  /** wirelint's image in a container, in front of {@code upstream}. */
  private String launchContainer(String upstream, String source) {
    try {
      container = ContainerProxy.start(options, upstream, report);
    } catch (LinkageError e) {
      throw new IllegalStateException(
          "wirelint: wirelint.container=true starts wirelint with Testcontainers, which is not on the test class"
              + " path: add org.testcontainers:testcontainers (scope test) to the project",
          e);
    }
    admin = container.admin();
    http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    String down = upstreamProblem();
    if (down != null) {
      container.stop();
      container = null;
      throw new IllegalStateException(
          "wirelint: the database does not answer through wirelint: " + down + ". No test was run");
    }
    return started(upstream, source, container.address(), container.describe() + ", ");
  }

  /** wirelint listens at {@code address}: the properties repointed, and the line that says so. */
  private String started(String upstream, String source, String address, String where) {
    this.upstream = upstream;
    uri = ClientUri.of(upstream, address);
    for (String name : options.repointed()) {
      previous.put(name, System.getProperty(name));
      System.setProperty(name, uri);
    }
    out.println(
        "wirelint: in front of the upstream from "
            + source
            + ", "
            + where
            + "listening on "
            + address
            + (options.repointed().isEmpty() ? "" : "; set " + String.join(", ", options.repointed()))
            + "; report: "
            + report);
    return uri;
  }

  /** Whether the database answers a hello through wirelint: null, else the message a client would get. */
  private String upstreamProblem() {
    if (admin == null) {
      return null;
    }
    try {
      HttpResponse<String> answer =
          http.send(
              HttpRequest.newBuilder(URI.create("http://" + admin + "/upstream"))
                  .timeout(Duration.ofSeconds(60))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      if (answer.statusCode() == 200) {
        return null;
      }
      Matcher error = ERROR.matcher(answer.body());
      return error.find() ? error.group(1).replace("\\\"", "\"") : "HTTP " + answer.statusCode();
    } catch (IOException e) {
      return "wirelint's admin endpoint did not answer: " + e.getMessage();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return "interrupted";
    }
  }

  /** A test as wirelint is told of it: its unique id, its source file and the line of its method. */
  record TestInfo(String id, String file, int line) {
    static TestInfo of(ExtensionContext test) {
      String file = test.getTestClass().map(Session::sourceFile).orElse(null);
      int line = file == null ? 0 : test.getTestMethod().map(m -> lineOf(file, m.getName())).orElse(0);
      return new TestInfo(test.getUniqueId(), file, line);
    }

    /** The JSON members saying it. */
    String members() {
      StringBuilder out = new StringBuilder("\"test\":").append(json(id));
      if (file != null) {
        out.append(",\"file\":").append(json(file));
      }
      if (line > 0) {
        out.append(",\"line\":").append(line);
      }
      return out.toString();
    }
  }

  /**
   * Tells wirelint which test runs now (null: the test ended), so that
   * findings name the tests whose operations showed them. Under parallel
   * execution tests overlap on one client: the test is kept for its thread
   * instead, and the driver's commands claim their connection for it
   * ({@link CommandClaims}, installed in a Spring context).
   */
  void mark(ExtensionContext test) {
    if (admin == null || closed) {
      return;
    }
    boolean parallel =
        test != null
            && test.getConfigurationParameter("junit.jupiter.execution.parallel.enabled")
                .map(Boolean::parseBoolean)
                .orElse(false);
    if (parallel) {
      CommandClaims.running(test == null ? null : TestInfo.of(test));
      return;
    }
    post("{" + (test == null ? "" : TestInfo.of(test).members()) + "}");
  }

  /** Claims the connection sending request {@code requestId} for {@code test}, before it is sent. */
  void claim(int requestId, TestInfo test) {
    post("{\"request_id\":" + requestId + "," + test.members() + "}");
  }

  private void post(String body) {
    if (markError != null) {
      return;
    }
    try {
      HttpResponse<String> answer =
          http.send(
              HttpRequest.newBuilder(URI.create("http://" + admin + "/tests"))
                  .timeout(Duration.ofSeconds(10))
                  .header("Content-Type", "application/json")
                  .POST(HttpRequest.BodyPublishers.ofString(body))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      if (answer.statusCode() != 200) {
        markError = "wirelint could not be told which test runs (HTTP " + answer.statusCode() + "): findings name no test";
      }
    } catch (IOException e) {
      markError = "wirelint could not be told which test runs (" + e.getMessage() + "): findings name no test";
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The test class's source file by Maven's layout, relative to the project, if it is there. */
  private static String sourceFile(Class<?> type) {
    Class<?> top = type;
    while (top.getEnclosingClass() != null) {
      top = top.getEnclosingClass();
    }
    String path = "src/test/java/" + top.getName().replace('.', '/') + ".java";
    return Files.isRegularFile(Paths.get(path)) ? path : null;
  }

  /** The first line of {@code file} that declares a method named {@code method}, or 0. */
  private static int lineOf(String file, String method) {
    try {
      List<String> lines = Files.readAllLines(Paths.get(file), StandardCharsets.UTF_8);
      Pattern declared = Pattern.compile("\\b" + Pattern.quote(method) + "\\s*\\(");
      for (int i = 0; i < lines.size(); i++) {
        if (declared.matcher(lines.get(i)).find() && !lines.get(i).trim().startsWith("//")) {
          return i + 1;
        }
      }
    } catch (IOException e) {
      // No line: the file is still named.
    }
    return 0;
  }

  private static String json(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }

  synchronized String uri() {
    if (uri != null) {
      return uri;
    }
    if (!options.enabled && options.upstream != null) {
      return options.upstream;
    }
    throw new IllegalStateException(
        "wirelint: no database to run in front of: set wirelint.upstream (junit-platform.properties or"
            + " -Dwirelint.upstream=URI), WIRELINT_UPSTREAM, or wirelint.env=VAR, or call Wirelint.uri(upstream)");
  }

  /** The end of the run: stop wirelint, print and write its report, fail on findings. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    for (Map.Entry<String, String> e : previous.entrySet()) {
      if (e.getValue() == null) {
        System.clearProperty(e.getKey());
      } else {
        System.setProperty(e.getKey(), e.getValue());
      }
    }
    if (!options.enabled) {
      return;
    }
    try {
      if (process == null && container == null) {
        throw new IllegalStateException(startFailure != null ? startFailure : uriProblem());
      }
      finish();
    } finally {
      if (extracted) {
        try {
          Files.deleteIfExists(binary);
        } catch (IOException e) {
          // A temporary file: left for the system to clean.
        }
      }
    }
  }

  private String uriProblem() {
    try {
      uri();
      return "wirelint: did not run";
    } catch (IllegalStateException e) {
      return e.getMessage() + " (wirelint ran in front of nothing)";
    }
  }

  private void finish() {
    String status = stopProxy();
    out.println();
    out.println("==================================== wirelint ====================================");
    // 143: the status it ends with on SIGTERM, as a process killed by it would.
    if (!status.equals("0") && !status.equals("143")) {
      out.println("wirelint: the proxy ended with status " + status + " before the end of the run; its log:");
      out.println(log());
    }
    if (!Files.isRegularFile(report)) {
      throw new IllegalStateException(
          "wirelint wrote no report (it exited with status " + status + "); its log:\n" + log());
    }
    List<String> args = new ArrayList<>(List.of("report", "--format", "text"));
    if (options.failOn != null) {
      args.add("--fail-on");
      args.add(options.failOn);
    }
    args.add(report.toString());
    Result text = run(args, null);
    if (text.status != 0 && text.status != 3) {
      throw new IllegalStateException("wirelint report failed (status " + text.status + "): " + text.stderr);
    }
    out.print(text.stdout);
    List<String> where = new ArrayList<>(List.of("report: " + report));
    if (options.sarif != null) {
      Path sarif = Paths.get(options.sarif).toAbsolutePath();
      Result written = run(List.of("report", "--format", "sarif", report.toString()), sarif);
      if (written.status != 0) {
        throw new IllegalStateException("wirelint report --format sarif failed: " + written.stderr);
      }
      where.add("SARIF: " + sarif);
    }
    Path junit = junitPath();
    if (junit != null) {
      List<String> junitArgs = new ArrayList<>(List.of("report", "--format", "junit"));
      if (options.failOn != null) {
        junitArgs.add("--fail-on");
        junitArgs.add(options.failOn);
      }
      junitArgs.add(report.toString());
      Result written = run(junitArgs, junit);
      if (written.status != 0 && written.status != 3) {
        throw new IllegalStateException("wirelint report --format junit failed: " + written.stderr);
      }
      where.add("JUnit XML: " + junit);
    }
    Matcher count = FINDINGS.matcher(text.stdout);
    String findings = count.find() ? count.group(1) : "?";
    out.println("wirelint: " + findings + " finding(s); " + String.join(", ", where));
    if (markError != null) {
      out.println("wirelint: " + markError);
    }
    out.flush();
    Matcher operations = OPERATIONS.matcher(text.stdout);
    if (operations.find() && operations.group(1).equals("0")) {
      String message =
          "wirelint saw no data operations: no test's database traffic went through it, so the findings say nothing"
              + " about this run. Likely causes: a Spring context built before the extension, pointed straight at"
              + " the database, and reused by the annotated classes (annotate every @SpringBootTest class with"
              + " @WirelintTest, or put the extension on a shared base class); a client built from a URI of its own,"
              + " not the properties wirelint repoints ("
              + String.join(", ", options.repointed())
              + "); or no test touches the database.";
      if (options.failOn != null) {
        message += " The run fails: wirelint.failOn=" + options.failOn + " is set.";
        out.println(message);
        out.flush();
        throw new WirelintFindingsException(message);
      }
      out.println(message);
      out.flush();
    }
    if (text.status == 3) {
      String message =
          "wirelint: a finding reached wirelint.failOn="
              + options.failOn
              + " (see the findings above): the run fails, whatever the tests' results";
      out.println(message);
      out.flush();
      throw new WirelintFindingsException(message);
    }
  }

  /**
   * Where the findings go as JUnit XML: wirelint.junit, else beside
   * Surefire's reports ({@code target/surefire-reports/TEST-wirelint.xml},
   * what CI test views read) when that directory exists.
   */
  private Path junitPath() {
    if (options.junit != null) {
      return Paths.get(options.junit).toAbsolutePath();
    }
    Path surefire = Paths.get("target", "surefire-reports");
    return Files.isDirectory(surefire) ? surefire.resolve("TEST-wirelint.xml").toAbsolutePath() : null;
  }

  private static final class Result {
    int status;
    String stdout = "";
    String stderr = "";
  }

  private Result run(List<String> args, Path stdoutTo) {
    List<String> command = new ArrayList<>();
    command.add(binary.toString());
    command.addAll(args);
    Result result = new Result();
    try {
      Path err = Files.createTempFile(dir, "report-", ".err");
      ProcessBuilder builder = new ProcessBuilder(command).redirectError(err.toFile());
      if (stdoutTo != null) {
        if (stdoutTo.getParent() != null) {
          Files.createDirectories(stdoutTo.getParent());
        }
        builder.redirectOutput(stdoutTo.toFile());
      }
      Process p = builder.start();
      p.getOutputStream().close();
      if (stdoutTo == null) {
        try (InputStream in = p.getInputStream()) {
          result.stdout = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
      }
      result.status = p.waitFor();
      result.stderr = Files.readString(err, StandardCharsets.UTF_8).trim();
      return result;
    } catch (IOException e) {
      throw new IllegalStateException("wirelint: running " + command + ": " + e.getMessage(), e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("wirelint: interrupted running " + command, e);
    }
  }

  /** The wirelint executable: wirelint.binary, WIRELINT_BINARY, else the one the jar carries. */
  private Path binary() throws IOException {
    String explicit = options.binary != null ? options.binary : System.getenv("WIRELINT_BINARY");
    if (explicit != null && !explicit.isBlank()) {
      Path path = Paths.get(explicit);
      if (!Files.isExecutable(path)) {
        throw new IllegalStateException(
            "wirelint: "
                + (options.binary != null ? "wirelint.binary" : "WIRELINT_BINARY")
                + " names "
                + explicit
                + ", which is not an executable file");
      }
      return path;
    }
    try (InputStream in = Session.class.getResourceAsStream("bin/wirelint")) {
      if (in == null) {
        throw new IllegalStateException(
            "wirelint: this wirelint-junit5 jar carries no wirelint binary: set WIRELINT_BINARY or"
                + " wirelint.binary to one");
      }
      Path path = dir.resolve("wirelint");
      Files.copy(in, path, StandardCopyOption.REPLACE_EXISTING);
      if (!path.toFile().setExecutable(true, true)) {
        throw new IllegalStateException("wirelint: cannot make " + path + " executable");
      }
      extracted = true;
      return path;
    }
  }

  /** SIGTERM: wirelint finishes in-flight requests and writes its final report. Its exit status. */
  private String stopProxy() {
    if (container != null) {
      return container.stop();
    }
    process.destroy();
    try {
      if (!process.waitFor(STOP_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
        process.destroyForcibly();
        process.waitFor();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      process.destroyForcibly();
    }
    return exitValue();
  }

  private String log() {
    if (container != null) {
      return container.log();
    }
    try {
      return Files.readString(log, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "";
    }
  }

  private String exitValue() {
    try {
      return String.valueOf(process.exitValue());
    } catch (IllegalThreadStateException e) {
      return "(running)";
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("wirelint: interrupted while starting", e);
    }
  }
}
